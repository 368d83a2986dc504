// moe.h — one mixture-of-experts feed-forward block on the device: router logits,
// selection, grouping, the experts' SwiGLU MLPs and the weighted sum, all queued on one
// stream with no host synchronisation (a decode step captures into a CUDA graph).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/moe_experts.h"
#include "engine/backend/cuda/moe_router.h"

namespace spark::cuda {

struct MoeLayerWeights {
  const float* norm = nullptr;         // [hidden]: the layer's ffn_norm, which the router applies in f32
  const float* router = nullptr;       // [experts, hidden], f32
  const float* router_bias = nullptr;  // [experts] (gpt-oss), or null
  ExpertWeights experts;
};

struct MoeConfig {
  ExpertShape shape;
  int32_t top_k = 0;
  RouterRule rule = RouterRule::SOFTMAX_TOPK;
  bool normalize = false;  // norm_topk_prob
};

// Which expert kernels run: AUTO takes the GEMVs up to kMoeGemvMaxTokens tokens (decode
// steps and their graph buckets), the grouped GEMM beyond.
enum class MoePath : uint8_t { AUTO, GEMV, GEMM };
inline constexpr int32_t kMoeGemvMaxTokens = 64;

// Device scratch of one MoE block for up to `chunk_tokens` tokens at a time (a larger
// step runs in chunks, so the scratch stays bounded by the chunk, not the step).
class MoeScratch {
 public:
  static constexpr int32_t kChunkTokens = 512;
  // Bytes for cfg at most kChunkTokens tokens a chunk, in one allocation.
  static size_t bytes(const MoeConfig& cfg);
  // Carves the buffers out of `memory` (bytes(cfg) of device memory, 256-byte aligned).
  MoeScratch(const MoeConfig& cfg, void* memory);

  float* logits = nullptr;   // [chunk, experts]
  int32_t* ids = nullptr;    // [chunk, top_k]
  float* weights = nullptr;  // [chunk, top_k]
  MoeGroups groups;
  void* act = nullptr;       // [chunk x top_k, inter], compute type
  float* y = nullptr;        // [chunk x top_k, hidden]
};

// out[t, :] (f32, [tokens, hidden]) = the MoE block for t < tokens, in chunks of
// MoeScratch::kChunkTokens: the router reads residual[t, :] (f32, the rows before
// ffn_norm) through w.norm, the experts read x[t, :] (the compute type's normed rows).
void moe_forward(HalfType type, const MoeConfig& cfg, const MoeLayerWeights& w, const float* residual, float eps,
                 const void* x, int32_t tokens, const MoeScratch& scratch, float* out, cudaStream_t stream,
                 bool programmatic, MoePath path = MoePath::AUTO);

}  // namespace spark::cuda
