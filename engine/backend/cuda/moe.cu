// moe.cu — the MoE block's launch sequence (moe.h): per chunk of tokens, the router's
// logits in f32, the selection and grouping (moe_router.h), gate/up with SwiGLU (or up
// with the squared ReLU), down, and the weighted sum (moe_experts.h); the host only
// chooses the path from the token count, which a CUDA graph's bucket fixes.
//
// Launches a chunk: a decode step (<= 64 tokens) runs logits, route+group (one launch),
// gate/up, down and the weighted sum: 5, where it ran 6 (route and group apart); a plain
// MoE layer (its output straight into the residual; layer_forward.cu) leaves the weighted
// sum to the next layer's add_rms_norm (out null): 4. Before -> after, a plain layer's
// chain from its ffn norm to the next layer's norm: 7 kernels -> 5, two dependency
// boundaries fewer (~1.5-2 us each for these small grids with programmatic launches),
// the combine's own time (~1-2 us: k rows of hidden f32 from L2 a token) folded into a
// norm that reads the same rows, and [tokens, hidden] f32 neither written nor read back
// (16 KB at B = 1 on 30B-A3B's hidden 2,048; 512 KB each way at B = 64). With the router
// loads before their wait and the grouping's scan (moe_router.cu), ~6-9 us a layer of
// the estimated 12-17 us routing chain, ~0.3-0.4 ms a decode step of 48 layers (estimated
// from launch and dependency costs, not measured on a GPU). Prefill chunks keep route
// and group apart; a one-chunk prefill of a plain layer folds its sum as well.
#include "engine/backend/cuda/moe.h"

#include <algorithm>

#include "engine/backend/cuda/common.cuh"

namespace spark::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

struct ScratchLayout {
  size_t logits, ids, weights, offsets, pair_row, row_token, active, tile_offsets, act, y, total;
  ScratchLayout(const MoeConfig& c, int32_t chunk_tokens) {
    SPARK_CHECK(chunk_tokens > 0, "MoeScratch: a chunk of no tokens");
    const size_t T = size_t(chunk_tokens), E = size_t(c.shape.experts), P = T * size_t(c.top_k);
    size_t at = 0;
    auto take = [&](size_t bytes) {
      const size_t here = at;
      at += aligned(bytes);
      return here;
    };
    logits = take(T * E * 4);
    ids = take(P * 4);
    weights = take(P * 4);
    offsets = take((E + 1) * 4);
    pair_row = take(P * 4);
    row_token = take(P * 4);
    active = take((E + 1) * 4);
    tile_offsets = take((E + 1) * 4);
    act = take(P * size_t(c.shape.inter) * 2);
    y = take(P * size_t(c.shape.hidden) * 4);
    total = at;
  }
};

}  // namespace

size_t MoeScratch::bytes(const MoeConfig& cfg, int32_t chunk_tokens) {
  return ScratchLayout(cfg, chunk_tokens).total;
}

MoeScratch::MoeScratch(const MoeConfig& cfg, int32_t chunk_tokens, void* memory) : chunk_tokens(chunk_tokens) {
  const ScratchLayout l(cfg, chunk_tokens);
  char* base = static_cast<char*>(memory);
  logits = reinterpret_cast<float*>(base + l.logits);
  ids = reinterpret_cast<int32_t*>(base + l.ids);
  weights = reinterpret_cast<float*>(base + l.weights);
  groups.offsets = reinterpret_cast<int32_t*>(base + l.offsets);
  groups.pair_row = reinterpret_cast<int32_t*>(base + l.pair_row);
  groups.row_token = reinterpret_cast<int32_t*>(base + l.row_token);
  groups.active = reinterpret_cast<int32_t*>(base + l.active);
  groups.tile_offsets = reinterpret_cast<int32_t*>(base + l.tile_offsets);
  act = base + l.act;
  y = reinterpret_cast<float*>(base + l.y);
}

void moe_forward(HalfType type, const MoeConfig& cfg, const MoeLayerWeights& w, const float* residual, float eps,
                 const void* x, int32_t tokens, const MoeScratch& scratch, float* out, cudaStream_t stream,
                 bool programmatic, MoePath path) {
  const ExpertShape& s = cfg.shape;
  const int32_t router_hidden = cfg.router_hidden > 0 ? cfg.router_hidden : s.hidden;
  const bool sigmoid = cfg.rule == RouterRule::SIGMOID_BIAS;
  // cpu::moe_ffn would add a router bias to the logits before the sigmoid; no model has both.
  SPARK_CHECK(!sigmoid || !w.router_bias, "moe_forward: SIGMOID_BIAS takes a score bias, not a router bias");
  SPARK_CHECK(out || tokens <= scratch.chunk_tokens, "moe_forward: the sum is left to the caller for one chunk only");
  for (int32_t t0 = 0; t0 < tokens; t0 += scratch.chunk_tokens) {
    const int32_t n = std::min(scratch.chunk_tokens, tokens - t0);
    const void* xc = static_cast<const char*>(x) + size_t(t0) * size_t(s.hidden) * 2;
    const int32_t pairs = n * cfg.top_k;
    const bool gemv = path == MoePath::GEMV || (path == MoePath::AUTO && n <= kMoeGemvMaxTokens);
    moe_router_logits(residual + size_t(t0) * size_t(router_hidden), w.norm, eps, w.router, n, router_hidden,
                      s.experts, scratch.logits, stream, programmatic);
    const float* bias = sigmoid ? w.score_bias : w.router_bias;
    if (n <= kMoeRouteGroupMaxTokens) {
      moe_route_group(cfg.rule, scratch.logits, bias, n, s.experts, cfg.top_k, cfg.normalize, scratch.ids,
                      scratch.weights, kMoeTileRows, scratch.groups, stream, programmatic, cfg.routed_scale,
                      w.expert_scale);
    } else {
      moe_route(cfg.rule, scratch.logits, bias, n, s.experts, cfg.top_k, cfg.normalize, scratch.ids, scratch.weights,
                stream, programmatic, cfg.routed_scale, w.expert_scale);
      moe_group(scratch.ids, n, cfg.top_k, s.experts, kMoeTileRows, scratch.groups, stream, programmatic);
    }
    if (gemv) {
      moe_gate_up_gemv(type, s, w.experts, scratch.groups, xc, pairs, scratch.act, stream, programmatic);
      moe_down_gemv(type, s, w.experts, scratch.groups, scratch.act, pairs, scratch.y, stream, programmatic);
    } else {
      moe_gate_up_gemm(type, s, w.experts, scratch.groups, xc, pairs, scratch.act, stream, programmatic);
      moe_down_gemm(type, s, w.experts, scratch.groups, scratch.act, pairs, scratch.y, stream, programmatic);
    }
    if (out)
      moe_combine(scratch.y, scratch.groups.pair_row, scratch.weights, n, cfg.top_k, s.hidden,
                  out + size_t(t0) * size_t(s.hidden), stream, programmatic);
  }
}

}  // namespace spark::cuda
