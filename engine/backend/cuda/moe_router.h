// moe_router.h — mixture-of-experts routing on the device: each token's top-k experts and
// their weights from the router logits, and the grouping of the (token, expert) pairs by
// expert that the expert kernels (moe_experts.h) read. No host round trip: everything a
// later kernel needs stays in device memory, so a decode step captures into a CUDA graph.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cpu/moe.h"

namespace spark::cuda {

using cpu::RouterRule;

// The most experts and the largest top-k the router kernel takes (one warp per token, 8
// logits a lane). Qwen3-MoE has 128 experts and k = 8, gpt-oss 32 or 128 and k = 4,
// Nemotron-3-Nano 128 and k = 6.
inline constexpr int32_t kMoeMaxExperts = 256;
inline constexpr int32_t kMoeMaxTopK = 32;

// logits[t, e] = rmsnorm(x[t]) · router[e] for t < tokens, all in f32: x the residual
// stream [tokens, hidden] (the model's width, which LatentMoE's experts do not share),
// norm the layer's ffn_norm weight [hidden], router [experts, hidden] (a router bias,
// gpt-oss's, is moe_route's). The router reads the f32 normed rows the CPU backend reads, not the 16-bit copy the experts take, so the two select the same experts
// unless two candidates are within f32 rounding of each other.
void moe_router_logits(const float* x, const float* norm, float eps, const float* router, int32_t tokens, int32_t hidden, int32_t experts, float* logits, cudaStream_t stream,
                       bool programmatic = false);

// ids[t, j], weights[t, j] (j < top_k, highest score first) for t < tokens from
// logits[tokens, experts] (f32), by `rule` (cpu/moe.h: the same selection and the same tie
// order as the CPU backend). bias [experts] or null: gpt-oss's router bias (TOPK_SOFTMAX),
// or Nemotron-H's score-correction bias (SIGMOID_BIAS: it selects, it does not weigh);
// SOFTMAX_TOPK ignores it. Every weight is then multiplied by routed_scale (Nemotron-H's
// routed_scaling_factor), or with expert_scale ([experts], Gemma 4) by its expert's, as
// cpu::moe_ffn does.
void moe_route(RouterRule rule, const float* logits, const float* bias, int32_t tokens, int32_t experts,
               int32_t top_k, bool normalize, int32_t* ids, float* weights, cudaStream_t stream,
               bool programmatic = false, float routed_scale = 1.0f, const float* expert_scale = nullptr);

// The pairs p = t * top_k + j grouped by expert, in device memory:
//   offsets[e] .. offsets[e + 1]: the grouped rows of expert e ([experts + 1]);
//   pair_row[p]: the grouped row of pair p ([pairs]); row_token[r]: the token of row r ([pairs]);
//   active[0 .. active[experts]): the experts with at least one row, ascending ([experts + 1]);
//   tile_offsets[e]: the first tile of expert e when each expert's rows are cut into
//     tiles of `tile_rows` ([experts + 1]; tile_offsets[experts] tiles in all).
// Within an expert the rows may come in any order: every consumer computes each row on
// its own and the weighted sum reads pairs in the order of j, so results do not depend on it.
struct MoeGroups {
  int32_t* offsets = nullptr;
  int32_t* pair_row = nullptr;
  int32_t* row_token = nullptr;
  int32_t* active = nullptr;
  int32_t* tile_offsets = nullptr;
};

void moe_group(const int32_t* ids, int32_t tokens, int32_t top_k, int32_t experts, int32_t tile_rows,
               const MoeGroups& groups, cudaStream_t stream, bool programmatic = false);

// moe_route then moe_group in one launch (one block) for up to kMoeRouteGroupMaxTokens
// tokens: the same ids, weights, offsets, active and tile_offsets bit for bit (one
// selection function and one grouping function serve both), pair_row and row_token a
// grouping as valid (rows within an expert come in any order either way). Decode steps
// take it; larger chunks the two launches, whose selection spreads over many blocks.
inline constexpr int32_t kMoeRouteGroupMaxTokens = 64;
void moe_route_group(RouterRule rule, const float* logits, const float* bias, int32_t tokens, int32_t experts,
                     int32_t top_k, bool normalize, int32_t* ids, float* weights, int32_t tile_rows,
                     const MoeGroups& groups, cudaStream_t stream, bool programmatic = false,
                     float routed_scale = 1.0f, const float* expert_scale = nullptr);

}  // namespace spark::cuda
