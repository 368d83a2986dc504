// device_weights.h — a pipeline stage's tensors in device memory, laid out for the
// kernels: BF16 matrices (q/k/v and gate/up fused into one GEMM each), f32 vectors.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark::cuda {

struct DeviceLayer {
  const __nv_bfloat16* qkv = nullptr;  // [(heads + 2 kv_heads) * head_dim, hidden]: q rows, k rows, v rows
  const float* qkv_bias = nullptr;     // same rows; null without attention bias
  const float* q_norm = nullptr;       // [head_dim]; null without qk_norm
  const float* k_norm = nullptr;
  const float* attn_norm = nullptr;  // [hidden]
  const float* ffn_norm = nullptr;
  const __nv_bfloat16* o = nullptr;        // [hidden, heads * head_dim]
  const __nv_bfloat16* gate_up = nullptr;  // [2 * intermediate, hidden]: gate rows, then up rows
  const __nv_bfloat16* down = nullptr;     // [hidden, intermediate]
};

class DeviceWeights {
 public:
  // Checks every tensor's presence and shape against `spec` (InputError naming it), then
  // allocates bytes(spec, weights.range()) once and uploads, converting to BF16 (GGUF
  // quantized types are dequantized here).
  DeviceWeights(const ModelSpec& spec, const Weights& weights);
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // Device bytes the tensors of `range` take once converted (for the memory plan).
  static uint64_t bytes(const ModelSpec& spec, LayerRange range, bool own_lm_head);

  const __nv_bfloat16* embedding = nullptr;  // [vocab, hidden]; null unless the stage holds layer 0
  const __nv_bfloat16* lm_head = nullptr;    // [vocab, hidden]; the embedding when tied
  const float* final_norm = nullptr;         // [hidden]; null unless the stage holds the last layer
  std::vector<DeviceLayer> layers;

 private:
  void* arena_ = nullptr;
};

}  // namespace spark::cuda
