// device_weights.h — a pipeline stage's tensors in device memory, laid out for the
// kernels: matrices in the compute type, BF16 or FP16 (q/k/v and gate/up fused into one
// GEMM each), f32 vectors.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/backend/cuda/kernel_args.h"
#include "engine/model/model_spec.h"
#include "engine/model/stage_weights.h"

namespace spark::cuda {

// Matrices are `const void*` in the compute type (DeviceWeights::type).
struct DeviceLayer {
  const void* qkv = nullptr;        // [(heads + 2 kv_heads) * head_dim, hidden]: q rows, k rows, v rows
  const float* qkv_bias = nullptr;  // same rows; null without attention bias
  const float* q_norm = nullptr;    // [head_dim]; null without qk_norm
  const float* k_norm = nullptr;
  const float* attn_norm = nullptr;  // [hidden]
  const float* ffn_norm = nullptr;
  const void* o = nullptr;        // [hidden, heads * head_dim]
  const void* gate_up = nullptr;  // [2 * intermediate, hidden]: gate rows, then up rows
  const void* down = nullptr;     // [hidden, intermediate]
};

class DeviceWeights {
 public:
  // Checks every tensor's dtype (InputError naming it), then allocates
  // bytes(spec, stage.range) once and uploads, converting matrices to `type` (GGUF
  // quantized types are dequantized here; a tensor already in `type` is copied as is).
  DeviceWeights(const ModelSpec& spec, const StageWeights& stage, HalfType type);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // Device bytes the tensors of `range` take once converted (for the memory plan; both
  // 16-bit types take the same).
  static uint64_t bytes(const ModelSpec& spec, LayerRange range);

  HalfType type = HalfType::BF16;
  const void* embedding = nullptr;    // [vocab, hidden]; null unless the stage holds layer 0
  const void* lm_head = nullptr;      // [vocab, hidden]; the embedding when tied
  const float* final_norm = nullptr;  // [hidden]; null unless the stage holds the last layer
  std::vector<DeviceLayer> layers;

 private:
  void* arena_ = nullptr;
};

}  // namespace spark::cuda
