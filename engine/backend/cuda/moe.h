// moe.h — one mixture-of-experts feed-forward block on the device: router logits,
// selection, grouping, the experts' MLPs (SwiGLU or squared ReLU) and the weighted sum, all queued on one
// stream with no host synchronisation (a decode step captures into a CUDA graph).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/moe_experts.h"
#include "engine/backend/cuda/moe_router.h"

namespace spark::cuda {

// The router's width is MoeConfig::router_hidden (the model's hidden size).
struct MoeLayerWeights {
  const float* norm = nullptr;         // [router_hidden]: the layer's ffn_norm, which the router applies in f32
  const float* router = nullptr;       // [experts, router_hidden], f32
  const float* router_bias = nullptr;  // [experts] (gpt-oss), or null; not with SIGMOID_BIAS
  const float* score_bias = nullptr;   // [experts]: SIGMOID_BIAS's score-correction bias (selection only), or null
  ExpertWeights experts;
  const float* expert_scale = nullptr;  // [experts]: each routing weight times its expert's (Gemma 4), or null
};

struct MoeConfig {
  ExpertShape shape;  // shape.hidden: the experts' width (LatentMoE: moe_latent_size)
  int32_t top_k = 0;
  RouterRule rule = RouterRule::SOFTMAX_TOPK;
  bool normalize = false;     // norm_topk_prob
  float routed_scale = 1.0f;  // every routing weight times this (Nemotron-H's routed_scaling_factor)
  // The residual's width the router reads; 0: shape.hidden. LatentMoE routes the hidden
  // state and runs the experts on its projection to shape.hidden (the caller projects).
  int32_t router_hidden = 0;
};

// Which expert kernels run: AUTO takes the GEMVs up to kMoeGemvMaxTokens tokens (decode
// steps and their graph buckets), the grouped GEMM beyond.
enum class MoePath : uint8_t { AUTO, GEMV, GEMM };
inline constexpr int32_t kMoeGemvMaxTokens = 64;

// Device scratch of one MoE block for up to `chunk_tokens` tokens at a time: a larger step
// runs in chunks, each of which reads every expert its tokens select, so the backend sizes
// the chunk by its largest step (the plan's max_num_batched_tokens) up to kMaxChunkTokens.
// A prefill step of 2,048 tokens of Qwen3-30B-A3B selects nearly all 128 experts a layer
// in any 512 of its tokens: in chunks of 512 it read the experts' 57 GB (BF16) four times,
// ~1 s of GB10's bandwidth, against ~0.15 s of its tensor cores; in one chunk, once. The
// scratch grows with the chunk: [chunk x top_k, hidden] f32 partial outputs dominate,
// 134 MB at 2,048 tokens of 30B-A3B, 268 MB at 4,096.
class MoeScratch {
 public:
  static constexpr int32_t kMaxChunkTokens = 4096;
  // Bytes for cfg at most chunk_tokens tokens a chunk, in one allocation.
  static size_t bytes(const MoeConfig& cfg, int32_t chunk_tokens);
  // Carves the buffers out of `memory` (bytes(cfg, chunk_tokens) of device memory, 256-byte
  // aligned).
  MoeScratch(const MoeConfig& cfg, int32_t chunk_tokens, void* memory);

  int32_t chunk_tokens = 0;
  float* logits = nullptr;   // [chunk, experts]
  int32_t* ids = nullptr;    // [chunk, top_k]
  float* weights = nullptr;  // [chunk, top_k]
  MoeGroups groups;
  void* act = nullptr;       // [chunk x top_k, inter], compute type
  float* y = nullptr;        // [chunk x top_k, hidden]
};

// out[t, :] (f32, [tokens, shape.hidden]) = the MoE block for t < tokens, in chunks of
// scratch.chunk_tokens: the router reads residual[t, :] (f32 [tokens, router_hidden],
// the rows before ffn_norm) through w.norm, the experts read x[t, :] (compute type
// [tokens, shape.hidden]: the normed rows, or LatentMoE's latent projection of them).
// out null (tokens <= scratch.chunk_tokens: one chunk): no weighted sum; it is left in the
// scratch, out[t, :] = sum over j < top_k of scratch.weights[t * top_k + j] *
// scratch.y[scratch.groups.pair_row[t * top_k + j], :] (moe_combine's, in the order of j),
// for the caller's next kernel to fold in (the next layer's add_rms_norm: rms_norm.h's
// WeightedRows) before any other MoE block runs on the scratch.
void moe_forward(HalfType type, const MoeConfig& cfg, const MoeLayerWeights& w, const float* residual, float eps,
                 const void* x, int32_t tokens, const MoeScratch& scratch, float* out, cudaStream_t stream,
                 bool programmatic, MoePath path = MoePath::AUTO);

}  // namespace spark::cuda
