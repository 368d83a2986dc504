// moe_router.cu — the router's logits, its selection (one warp per token: softmax, gpt-oss's
// or Nemotron-H's sigmoid rule) and the grouping of the selected (token, expert) pairs by
// expert (one block); for decode steps the selection and the grouping in one launch.
//
// Bytes and work: selection reads tokens x experts f32 logits (B = 1 on Qwen3-30B-A3B:
// 512 bytes) and writes 2 x top_k values a token; the grouping reads the tokens x top_k
// ids and writes 3 ints a pair. Both are latency, not bandwidth: a few microseconds
// beside the ~1 ms of expert weights a decode step streams on GB10. The selection keeps
// each lane's 8 logits in registers and finds the k winners by k warp arg-max
// reductions (5 shuffles of value and index each): 8 x 10 shuffles for k = 8.
// The grouping is one block of 1024 threads: shared-memory counters (experts <= 256), a
// warp's scan over the experts (8 a lane), then each pair takes a row with a shared atomic.
// One block is enough for a chunk of 4096 tokens x 8 (32,768 pairs, 32 a thread); a single
// block on a 48-SM GPU costs its latency only, and it is one launch whatever the batch.
//
// The decode chain (moe.cu has the whole block's count): the routing was three dependent
// launches, logits -> route -> group, each waiting at griddepcontrol.wait for the one
// before to finish and flush (~1.5-2 us a boundary for grids this small on H100/GB10,
// before any work). Now:
// - router_logits_kernel issues its router loads before the wait (4 values a lane into
//   registers, the rest of the block's rows and the norm as L2 prefetches): the router is
//   a weight, so its DRAM latency (~1 us; 1 MB f32 on 30B-A3B, 64 KB a block at B = 1)
//   runs under the previous kernel instead of after it.
// - route_group_kernel (tokens <= 64) selects and groups in one block: one boundary fewer
//   (~1.5-2 us), and the ids go from registers to shared memory, not through L2. Its
//   32 warps route 2 tokens each at B = 64, where route_kernel spread 16 blocks: one more
//   route pass (~1 us) against the boundary it saves, so it stays ahead up to 64 tokens;
//   prefill chunks keep the two launches.
// - The experts' first rows and tiles come from a warp scan instead of one thread's walk
//   over the experts (128 to 256 dependent shared loads and global stores, ~2 us), in both
//   grouping kernels.
// Together ~4-5 us a MoE layer of latency at decode (estimated from those costs, not
// measured here), ~200 us a step of a 48-layer Qwen3-30B-A3B.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/moe_router.h"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {
namespace {

constexpr int kLogitWarps = 8;  // experts a block, one a warp
// Router values each lane loads before the dependency wait (the first 128 of its expert's
// row), and the L2 lines it asks for: the rest of the row.
constexpr int kEarlyLoads = 4;
constexpr int kLineFloats = 32;  // a 128-byte L2 line

// The router and the norm are weights: nothing the kernels ahead write, so their L2
// prefetches (ptx.cuh) may go before the dependency wait.

// Block (expert group, token): the token's RMSNorm in f32 as cpu::rms_norm computes it
// (weight * (x * inv)), then one expert's dot product a warp. Bytes: the router once per
// token through L2 (Qwen3-30B-A3B: 1 MB in f32; at B = 1, 16 blocks of 64 KB each).
// Before the dependency wait (only x, the residual, comes from the kernel ahead) each lane
// loads its first kEarlyLoads router values into registers and the first token's blocks
// prefetch the rest of their rows and the norm into L2, so the DRAM latency of the router
// (~1 us) overlaps the previous kernel instead of following it. The sum keeps its order:
// the same logits bit for bit.
__global__ void __launch_bounds__(kLogitWarps * 32)
    router_logits_kernel(const float* __restrict__ x, const float* __restrict__ norm, float eps,
                         const float* __restrict__ router, int hidden, int experts,
                         float* __restrict__ logits) {
  __shared__ float scratch[32];
  const int t = blockIdx.y, lane = threadIdx.x & 31;
  const int e = blockIdx.x * kLogitWarps + (threadIdx.x >> 5);
  const bool has_expert = e < experts;
  const float* w = router + int64_t(has_expert ? e : 0) * hidden;
  float early_w[kEarlyLoads];
#pragma unroll
  for (int i = 0; i < kEarlyLoads; ++i) {
    const int h = lane + 32 * i;
    early_w[i] = has_expert && h < hidden ? __ldg(w + h) : 0.0f;
  }
  if (t == 0) {
    if (has_expert)
      for (int h = (kEarlyLoads + lane) * kLineFloats; h < hidden; h += 32 * kLineFloats) prefetch_l2(w + h);
    if (threadIdx.x < 32)
      for (int h = lane * kLineFloats; h < hidden; h += 32 * kLineFloats) prefetch_l2(norm + h);
  }
  wait_then_allow_next_kernel();
  const float* xt = x + int64_t(t) * hidden;
  float ss = 0.0f;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) ss += xt[h] * xt[h];
  const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / float(hidden) + eps);
  if (!has_expert) return;
  float dot = 0.0f;
#pragma unroll
  for (int i = 0; i < kEarlyLoads; ++i) {
    const int h = lane + 32 * i;
    if (h < hidden) dot = fmaf(norm[h] * (xt[h] * inv), early_w[i], dot);
  }
  // 4 loads in flight a lane; the compiler's own unrolling took 48 registers on sm_121.
#pragma unroll 4
  for (int h = lane + 32 * kEarlyLoads; h < hidden; h += 32) dot = fmaf(norm[h] * (xt[h] * inv), __ldg(w + h), dot);
  dot = warp_sum(dot);
  if (lane == 0) logits[int64_t(t) * experts + e] = dot;
}

constexpr int kRouteWarps = 4;
constexpr int kPerLane = kMoeMaxExperts / 32;
constexpr int kNone = 0x7fffffff;

// Nemotron-H's router score, as cpu::route_token computes it.
__device__ __forceinline__ float sigmoid_score(float v) { return 1.0f / (1.0f + expf(-v)); }

// (value, index) with the larger value first and, on equal values, the lower index: the
// order torch.topk gives and the CPU backend's partial_sort keeps.
__device__ __forceinline__ bool beats(float v, int i, float best_v, int best_i) {
  return best_i == kNone || v > best_v || (v == best_v && i < best_i);
}

struct Routed {
  int32_t id;    // lane j < top_k: the j-th selected expert
  float weight;  // its weight, times its scale
};

// One token's selection by one warp, from its row of logits (route_kernel's and
// route_group_kernel's: one function, so the two give the same bits).
__device__ __forceinline__ Routed route_token(const float* __restrict__ row, const float* __restrict__ bias, int experts,
                                              int top_k, RouterRule rule, bool normalize, float routed_scale,
                                              const float* __restrict__ expert_scale, int lane) {
  float score[kPerLane];
  // NaN scores rank below every number (-inf), so a NaN logit still yields valid ids.
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = i * 32 + lane;
    const float v = e < experts ? row[e] : -INFINITY;
    score[i] = v != v ? -INFINITY : v;
  }
  if (rule == RouterRule::SOFTMAX_TOPK) {
    // exp(x - max) * (1 / sum), as cpu::softmax: equal logits stay exactly equal.
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) mx = fmaxf(mx, score[i]);
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      score[i] = i * 32 + lane < experts ? expf(score[i] - mx) : 0.0f;
      sum += score[i];
    }
    const float inv = 1.0f / warp_sum(sum);
    // A row with no finite maximum (all NaN or -inf, or a +inf) gives NaN scores, which
    // no comparison ranks: as -inf the selection still takes k distinct experts, the
    // lowest ids first, instead of ids past the experts on lanes that ran out.
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      score[i] *= inv;
      score[i] = score[i] != score[i] ? -INFINITY : score[i];
    }
  } else if (rule == RouterRule::SIGMOID_BIAS) {
    // The score-correction bias joins the sigmoid score for the selection only; the
    // weights below recompute the plain score of each winner from its logit.
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (i * 32 + lane < experts) score[i] = sigmoid_score(score[i]) + (bias ? bias[i * 32 + lane] : 0.0f);
  } else if (bias) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i)
      if (i * 32 + lane < experts) score[i] += bias[i * 32 + lane];
  }
  unsigned taken = 0;        // bit i: this lane's expert i * 32 + lane is selected
  float mine = -INFINITY;    // lane j < top_k: the j-th selection's score
  int32_t my_id = 0;
  for (int j = 0; j < top_k; ++j) {
    float best_v = -INFINITY;
    int best_i = kNone;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = i * 32 + lane;
      if (e < experts && !(taken >> i & 1u) && beats(score[i], e, best_v, best_i)) {
        best_v = score[i];
        best_i = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best_v, o);
      const int i = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (i != kNone && beats(v, i, best_v, best_i)) {
        best_v = v;
        best_i = i;
      }
    }
    if ((best_i & 31) == lane) taken |= 1u << (best_i >> 5);
    if (lane == j) {
      mine = best_v;
      my_id = best_i;
    }
  }
  const bool holds = lane < top_k;
  float w;
  if (rule == RouterRule::SOFTMAX_TOPK) {
    const float sum = warp_sum(holds ? mine : 0.0f);
    w = normalize ? mine / sum : mine;
  } else if (rule == RouterRule::SIGMOID_BIAS) {
    const float v = row[my_id];
    const float plain = holds ? sigmoid_score(v != v ? -INFINITY : v) : 0.0f;
    // cpu::route_token's sum: from 1e-20, in the order of j (every lane adds the same terms).
    float sum = 1e-20f;
    for (int j = 0; j < top_k; ++j) sum += __shfl_sync(0xffffffffu, plain, j);
    w = normalize ? plain / sum : plain;
  } else {
    const float mx = warp_max(holds ? mine : -INFINITY);
    const float e = holds ? expf(mine - mx) : 0.0f;
    w = e * (1.0f / warp_sum(e));
  }
  return {my_id, holds ? w * (expert_scale ? expert_scale[my_id] : routed_scale) : 0.0f};
}

__global__ void __launch_bounds__(kRouteWarps * 32)
    route_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int tokens, int experts, int top_k,
                 RouterRule rule, bool normalize, float routed_scale, const float* __restrict__ expert_scale,
                 int32_t* __restrict__ ids, float* __restrict__ weights) {
  wait_then_allow_next_kernel();
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * kRouteWarps + (threadIdx.x >> 5);
  if (t >= tokens) return;
  const Routed r = route_token(logits + int64_t(t) * experts, bias, experts, top_k, rule, normalize, routed_scale,
                               expert_scale, lane);
  if (lane < top_k) {
    ids[int64_t(t) * top_k + lane] = r.id;
    weights[int64_t(t) * top_k + lane] = r.weight;
  }
}

constexpr int kGroupThreads = 1024;

// The grouping by one block of kGroupThreads threads (group_kernel's and
// route_group_kernel's): the pairs' experts ids[p] (global or shared memory) counted in
// count[], the experts' first rows and tiles by warp 0 (lane l owns experts 8l .. 8l + 7:
// three warp scans instead of one thread's walk over 256 experts), then each pair takes a
// row with a shared atomic (the order within an expert is free, moe_router.h).
__device__ __forceinline__ void group_pairs(const int32_t* ids, int pairs, int top_k, int experts, int tile_rows,
                                            const MoeGroups& g, int* count, int* cursor) {
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&count[ids[p]], 1);
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, first = lane * kPerLane;
    int rows = 0, tiles = 0, active = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = first + i < experts ? count[first + i] : 0;
      rows += c;
      tiles += (c + tile_rows - 1) / tile_rows;
      active += c > 0;
    }
    int rows_to = rows, tiles_to = tiles, active_to = active;  // inclusive prefix sums over the lanes
    for (int o = 1; o < 32; o <<= 1) {
      const int r = __shfl_up_sync(0xffffffffu, rows_to, o);
      const int t = __shfl_up_sync(0xffffffffu, tiles_to, o);
      const int a = __shfl_up_sync(0xffffffffu, active_to, o);
      if (lane >= o) rows_to += r, tiles_to += t, active_to += a;
    }
    int row = rows_to - rows, tile = tiles_to - tiles, n_active = active_to - active;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = first + i;
      if (e >= experts) break;
      const int c = count[e];
      cursor[e] = row;
      g.offsets[e] = row;
      g.tile_offsets[e] = tile;
      if (c > 0) g.active[n_active++] = e;
      row += c;
      tile += (c + tile_rows - 1) / tile_rows;
    }
    if (lane == 31) {
      g.offsets[experts] = rows_to;
      g.tile_offsets[experts] = tiles_to;
      g.active[experts] = active_to;
    }
  }
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int row = atomicAdd(&cursor[ids[p]], 1);
    g.pair_row[p] = row;
    g.row_token[row] = p / top_k;
  }
}

__global__ void __launch_bounds__(kGroupThreads)
    group_kernel(const int32_t* __restrict__ ids, int pairs, int top_k, int experts, int tile_rows, MoeGroups g) {
  __shared__ int count[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  wait_then_allow_next_kernel();
  group_pairs(ids, pairs, top_k, experts, tile_rows, g, count, cursor);
}

// Selection and grouping of a decode step in one block: warp w routes tokens w, w + 32
// (route_token, as route_kernel), keeping the ids in shared memory as well, then the block
// groups them (group_pairs, as group_kernel). One launch and one dependency wait fewer.
// One block an SM said outright: without it ptxas held sm_90 to 32 registers and spilled.
__global__ void __launch_bounds__(kGroupThreads, 1)
    route_group_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int tokens, int experts,
                       int top_k, RouterRule rule, bool normalize, float routed_scale,
                       const float* __restrict__ expert_scale, int tile_rows, int32_t* __restrict__ ids,
                       float* __restrict__ weights, MoeGroups g) {
  __shared__ int32_t pair_ids[kMoeRouteGroupMaxTokens * kMoeMaxTopK];
  __shared__ int count[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  wait_then_allow_next_kernel();
  const int lane = threadIdx.x & 31;
  for (int t = threadIdx.x >> 5; t < tokens; t += kGroupThreads / 32) {
    const Routed r = route_token(logits + int64_t(t) * experts, bias, experts, top_k, rule, normalize, routed_scale,
                                 expert_scale, lane);
    if (lane < top_k) {
      pair_ids[t * top_k + lane] = r.id;
      ids[int64_t(t) * top_k + lane] = r.id;
      weights[int64_t(t) * top_k + lane] = r.weight;
    }
  }
  __syncthreads();
  group_pairs(pair_ids, tokens * top_k, top_k, experts, tile_rows, g, count, cursor);
}

}  // namespace

void moe_router_logits(const float* x, const float* norm, float eps, const float* router, int32_t tokens, int32_t hidden, int32_t experts, float* logits, cudaStream_t stream,
                       bool programmatic) {
  SPARK_CHECK(hidden > 0 && experts >= 1 && tokens >= 0, "moe_router_logits: bad shape");
  if (tokens == 0) return;
  launch_kernel("router_logits_kernel", programmatic, router_logits_kernel,
                dim3(unsigned(ceil_div(experts, kLogitWarps)), unsigned(tokens)), dim3(kLogitWarps * 32), 0, stream, x,
                norm, eps, router, int(hidden), int(experts), logits);
}

void moe_route(RouterRule rule, const float* logits, const float* bias, int32_t tokens, int32_t experts,
               int32_t top_k, bool normalize, int32_t* ids, float* weights, cudaStream_t stream, bool programmatic,
               float routed_scale, const float* expert_scale) {
  SPARK_CHECK(experts >= 1 && experts <= kMoeMaxExperts && top_k >= 1 && top_k <= std::min(experts, kMoeMaxTopK),
              "moe_route: need 1 <= top_k <= min(experts, 32) and experts <= 256");
  if (tokens <= 0) return;
  launch_kernel("route_kernel", programmatic, route_kernel, dim3(unsigned(ceil_div(tokens, kRouteWarps))),
                dim3(kRouteWarps * 32), 0, stream, logits, bias, tokens, experts, top_k, rule, normalize, routed_scale,
                expert_scale, ids, weights);
}

void moe_group(const int32_t* ids, int32_t tokens, int32_t top_k, int32_t experts, int32_t tile_rows,
               const MoeGroups& groups, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(experts >= 1 && experts <= kMoeMaxExperts && top_k >= 1 && tile_rows >= 1 && tokens >= 0,
              "moe_group: bad shape");
  launch_kernel("group_kernel", programmatic, group_kernel, dim3(1), dim3(kGroupThreads), 0, stream, ids,
                int(tokens * top_k), int(top_k), int(experts), int(tile_rows), groups);
}

void moe_route_group(RouterRule rule, const float* logits, const float* bias, int32_t tokens, int32_t experts,
                     int32_t top_k, bool normalize, int32_t* ids, float* weights, int32_t tile_rows,
                     const MoeGroups& groups, cudaStream_t stream, bool programmatic, float routed_scale,
                     const float* expert_scale) {
  SPARK_CHECK(experts >= 1 && experts <= kMoeMaxExperts && top_k >= 1 && top_k <= std::min(experts, kMoeMaxTopK),
              "moe_route_group: need 1 <= top_k <= min(experts, 32) and experts <= 256");
  SPARK_CHECK(tokens >= 0 && tokens <= kMoeRouteGroupMaxTokens && tile_rows >= 1,
              "moe_route_group: at most 64 tokens (moe_route and moe_group take more)");
  launch_kernel("route_group_kernel", programmatic, route_group_kernel, dim3(1), dim3(kGroupThreads), 0, stream,
                logits, bias, int(tokens), int(experts), int(top_k), rule, normalize, routed_scale, expert_scale,
                int(tile_rows), ids, weights, groups);
}

}  // namespace spark::cuda
