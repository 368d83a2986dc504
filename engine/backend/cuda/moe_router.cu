// moe_router.cu — the router's selection (one warp per token: softmax, gpt-oss's or
// Nemotron-H's sigmoid rule) and the grouping of the selected (token, expert) pairs by
// expert (one block).
//
// Bytes and work: selection reads tokens x experts f32 logits (B = 1 on Qwen3-30B-A3B:
// 512 bytes) and writes 2 x top_k values a token; the grouping reads the tokens x top_k
// ids and writes 3 ints a pair. Both are latency, not bandwidth: a few microseconds
// beside the ~1 ms of expert weights a decode step streams on GB10. The selection keeps
// each lane's 8 logits in registers and finds the k winners by k warp arg-max
// reductions (5 shuffles of value and index each): 8 x 10 shuffles for k = 8.
// The grouping is one block of 1024 threads: shared-memory counters (experts <= 256),
// one thread's scan over the experts, then each pair takes a row with a shared atomic.
// One block is enough for a chunk of 4096 tokens x 8 (32,768 pairs, 32 a thread); a single
// block on a 48-SM GPU costs its latency only, and it is one launch whatever the batch.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/moe_router.h"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {
namespace {

constexpr int kLogitWarps = 8;  // experts a block, one a warp

// Block (expert group, token): the token's RMSNorm in f32 as cpu::rms_norm computes it
// (weight * (x * inv)), then one expert's dot product a warp. Bytes: the router once per
// token through L2 (Qwen3-30B-A3B: 1 MB in f32; at B = 1, 16 blocks of 64 KB each).
__global__ void __launch_bounds__(kLogitWarps * 32)
    router_logits_kernel(const float* __restrict__ x, const float* __restrict__ norm, float eps,
                         const float* __restrict__ router, int hidden, int experts,
                         float* __restrict__ logits) {
  __shared__ float scratch[32];
  wait_then_allow_next_kernel();
  const int t = blockIdx.y, lane = threadIdx.x & 31;
  const float* xt = x + int64_t(t) * hidden;
  float ss = 0.0f;
  for (int h = threadIdx.x; h < hidden; h += blockDim.x) ss += xt[h] * xt[h];
  const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / float(hidden) + eps);
  const int e = blockIdx.x * kLogitWarps + (threadIdx.x >> 5);
  if (e >= experts) return;
  const float* w = router + int64_t(e) * hidden;
  float dot = 0.0f;
  for (int h = lane; h < hidden; h += 32) dot = fmaf(norm[h] * (xt[h] * inv), __ldg(w + h), dot);
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

__global__ void __launch_bounds__(kRouteWarps * 32)
    route_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int tokens, int experts, int top_k,
                 RouterRule rule, bool normalize, float routed_scale, const float* __restrict__ expert_scale,
                 int32_t* __restrict__ ids, float* __restrict__ weights) {
  wait_then_allow_next_kernel();
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * kRouteWarps + (threadIdx.x >> 5);
  if (t >= tokens) return;
  float score[kPerLane];
  // NaN scores rank below every number (-inf), so a NaN logit still yields valid ids.
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = i * 32 + lane;
    const float v = e < experts ? logits[int64_t(t) * experts + e] : -INFINITY;
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
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) score[i] *= inv;
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
    const float v = logits[int64_t(t) * experts + my_id];
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
  if (holds) {
    ids[int64_t(t) * top_k + lane] = my_id;
    weights[int64_t(t) * top_k + lane] = w * (expert_scale ? expert_scale[my_id] : routed_scale);
  }
}

constexpr int kGroupThreads = 1024;

__global__ void __launch_bounds__(kGroupThreads)
    group_kernel(const int32_t* __restrict__ ids, int pairs, int top_k, int experts, int tile_rows, MoeGroups g) {
  wait_then_allow_next_kernel();
  __shared__ int count[kMoeMaxExperts];
  __shared__ int cursor[kMoeMaxExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&count[ids[p]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int row = 0, tile = 0, n_active = 0;
    for (int e = 0; e < experts; ++e) {
      cursor[e] = row;
      g.offsets[e] = row;
      g.tile_offsets[e] = tile;
      if (count[e] > 0) g.active[n_active++] = e;
      row += count[e];
      tile += (count[e] + tile_rows - 1) / tile_rows;
    }
    g.offsets[experts] = row;
    g.tile_offsets[experts] = tile;
    g.active[experts] = n_active;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int row = atomicAdd(&cursor[ids[p]], 1);
    g.pair_row[p] = row;
    g.row_token[row] = p / top_k;
  }
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

}  // namespace spark::cuda
