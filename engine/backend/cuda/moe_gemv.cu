// moe_gemv.cu — the decode path of the experts (moe_experts.h): a GEMV per active expert
// over the grouped rows that chose it, SwiGLU (or the ungated squared ReLU) fused into the
// gate/up pass, and the weighted sum of each token's k expert outputs.
//
// Bytes first (Qwen3-30B-A3B: hidden 2048, 768 per expert, 128 experts, k = 8). One
// expert is 3 x 768 x 2048 = 4.7M weights: 9.4 MB in BF16, 5.0 MB in Q8_0. A decode step
// of B tokens must read each distinct selected expert once: B = 1 reads 8 experts (40 MB
// Q8_0 a layer, 1.9 GB over 48 layers: GB10's ~218 GB/s allows ~110 steps/s for the
// experts alone), B = 16 about 81 of 128. The kernels here read each selected expert's
// weights exactly once per step when no expert serves more than kTokens rows (else once
// per kTokens rows); the activations (B x 2048 x 2 bytes) and the f32 outputs (B x k x
// 2048 x 4) are noise beside them.
//
// FP8 experts (Qwen3-30B-A3B-FP8: e4m3, 128x128 block scales) stay packed: one expert is
// 4,718,592 e4m3 bytes plus 3 matrices x (768/128 x 2048/128 = 96) f32 scales = 1,152
// bytes, 4.72 MB (half of BF16, 94% of Q8_0). B = 1 reads 8 of them: 37.8 MB a layer,
// 1.81 GB over 48 layers, ~120 steps/s for the experts alone on GB10 (~218 GB/s), ~1650
// on H100 (~3.0 TB/s). A lane's chunk is 16 e4m3 bytes (a warp: 512 contiguous bytes, as
// Q8_0), its scale one f32 through the read-only cache (a 128-column block is shared by 8
// lanes); the decode is one e4m3 -> f32 conversion and one multiply a weight (fp8.cu).
//
// MXFP4 experts (gpt-oss-20b: hidden 2880, 32 experts of 2880, k = 4) stay packed: one
// expert is 3 x 2880 x 2880 values at 17 bytes per 32 (16 code bytes, one E8M0 scale) =
// 13.2 MB, plus 34.6 KB of f32 biases. B = 1 reads 4 of them: 53 MB a layer, 1.27 GB over
// 24 layers, ~170 steps/s for the experts alone on GB10 (~218 GB/s), ~2,350 on H100. A
// lane's chunk is one block (16 bytes: a warp reads 512 contiguous bytes, as Q8_0) and its
// scale byte through the read-only cache; the decode places each E2M1 code in an f16 and
// multiplies by the scale (weight_readers.cuh's e2m1_word): ~4.5 instructions and one FMA a
// weight (make kernel-report; ~12.7 when it built f32 bits per code with selects),
// 2 x 3 x 2880^2 x 4 = 0.2 GFLOP a token a layer, far under the bytes' time. Waves: the
// gate/up launch of B = 1 is 360 x 4 = 1,440 blocks of 8 warps (30 blocks an SM on GB10's
// 48 SMs, 11 on H100's 132), down the same.
//
// Nemotron-3-Nano (hidden 2688, 128 experts of 1856, k = 6, ungated squared-ReLU experts)
// has two matrices an expert, not three: 2 x 1856 x 2688 = 10.0M weights, 10.6 MB in
// Q8_0 (with its f16 scale a 32), 20.0 MB in BF16; B = 1 reads 6 of them, 63.5 MB Q8_0 a
// MoE layer. The ungated gate/up warp reads one row an output instead of two.
//
// Layout: blockIdx.y walks the active experts (moe_router.h's list; blocks past its end
// exit at once), blockIdx.x a range of output rows, one warp per output row. The gate/up
// warp reads gate row i and up row i of its expert together, so SwiGLU needs no second
// pass and no [rows, 2 x inter] intermediate. Each lane reads 16 bytes of each row per
// step (a warp: 512 contiguous bytes, coalesced) and multiplies it with up to kTokens
// activation rows (L1/L2 resident) into f32 accumulators. Waves: B = 1 gives 8 experts x
// 96 blocks = 768 blocks of 8 warps for gate/up (6.1k warps, ~16 a GB10 SM-wave of 48 SMs,
// ~5 on H100's 132), enough loads in flight for the bandwidth (q8_0.cu's arithmetic).
#include <algorithm>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/moe_activation.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/weight_readers.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTokens = 16;  // rows a warp multiplies per pass over its weight rows

// V activations of row x starting at column c, through the cached path (re-read by every warp).
template <typename T, int V>
__device__ __forceinline__ void load_x(const T* p, float (&out)[V]) {
#pragma unroll
  for (int h = 0; h < V / 8; ++h) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + h);
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[h * 8 + i] = to_f32(v[i]);
  }
}

// Expert `a`-th active or -1.
__device__ __forceinline__ int active_expert(const MoeGroups& g, int experts, int a) {
  return a < g.active[experts] ? g.active[a] : -1;
}

// kGated: gate row i and up row i of expert e (stack rows e * 2 * inter + i and + inter),
// SwiGLU; else up row i alone (stack row e * inter + i), relu(up)^2.
template <typename T, typename R, bool kGated>
__global__ void __launch_bounds__(kThreads)
    gate_up_gemv_kernel(R w, ExpertShape s, ExpertExtras ex, MoeGroups g, const T* __restrict__ x,
                        T* __restrict__ act) {
  constexpr int V = R::kValues;
  wait_then_allow_next_kernel();
  const int lane = threadIdx.x & 31;
  const int e = active_expert(g, s.experts, blockIdx.y);
  const int i = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (e < 0 || i >= s.inter) return;
  const int64_t up_r = kGated ? int64_t(e) * 2 * s.inter + s.inter + i : int64_t(e) * s.inter + i;
  const int64_t gate_r = up_r - s.inter;  // kGated only
  const int row0 = g.offsets[e], rows = g.offsets[e + 1] - row0;
  const int k = s.hidden;
  for (int b0 = 0; b0 < rows; b0 += kTokens) {
    const int nb = min(kTokens, rows - b0);
    int token[kTokens];
#pragma unroll
    for (int j = 0; j < kTokens; ++j) token[j] = j < nb ? g.row_token[row0 + b0 + j] : 0;
    float ag[kTokens] = {}, au[kTokens] = {};
    for (int c = lane * V; c < k; c += 32 * V) {
      float wg[V], wu[V];
      typename R::Chunk qg{};
      if constexpr (kGated) qg = w.load(gate_r, c);
      const typename R::Chunk qu = w.load(up_r, c);
      if constexpr (kGated) w.decode(qg, gate_r, c, wg);
      w.decode(qu, up_r, c, wu);
#pragma unroll
      for (int j = 0; j < kTokens; ++j) {
        if (j < nb) {
          float xv[V];
          load_x<T, V>(x + int64_t(token[j]) * k + c, xv);
#pragma unroll
          for (int v = 0; v < V; ++v) {
            if constexpr (kGated) ag[j] = fmaf(wg[v], xv[v], ag[j]);
            au[j] = fmaf(wu[v], xv[v], au[j]);
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kTokens; ++j) {
      if (j < nb) {
        const float up = warp_sum(au[j]) * row_scale(w, up_r);
        float a;
        if constexpr (kGated) a = expert_swiglu(ex, gate_r, up_r, warp_sum(ag[j]) * row_scale(w, gate_r), up);
        else a = expert_relu2(ex, up_r, up);
        if (lane == 0) act[int64_t(row0 + b0 + j) * s.inter + i] = from_f32<T>(a);
      }
    }
  }
}

template <typename T, typename R>
__global__ void __launch_bounds__(kThreads)
    down_gemv_kernel(R w, ExpertShape s, ExpertExtras ex, MoeGroups g, const T* __restrict__ act,
                     float* __restrict__ y) {
  constexpr int V = R::kValues;
  wait_then_allow_next_kernel();
  const int lane = threadIdx.x & 31;
  const int e = active_expert(g, s.experts, blockIdx.y);
  const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (e < 0 || n >= s.hidden) return;
  const int64_t r = int64_t(e) * s.hidden + n;
  const int row0 = g.offsets[e], rows = g.offsets[e + 1] - row0;
  const int k = s.inter;
  for (int b0 = 0; b0 < rows; b0 += kTokens) {
    const int nb = min(kTokens, rows - b0);
    float acc[kTokens] = {};
    for (int c = lane * V; c < k; c += 32 * V) {
      float wv[V];
      w.decode(w.load(r, c), r, c, wv);
#pragma unroll
      for (int j = 0; j < kTokens; ++j) {
        if (j < nb) {
          float av[V];
          load_x<T, V>(act + int64_t(row0 + b0 + j) * k + c, av);
#pragma unroll
          for (int v = 0; v < V; ++v) acc[j] = fmaf(wv[v], av[v], acc[j]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kTokens; ++j) {
      if (j < nb) {
        const float sum = warp_sum(acc[j]) * row_scale(w, r);
        if (lane == 0) y[int64_t(row0 + b0 + j) * s.hidden + n] = expert_down_out(ex, r, sum);
      }
    }
  }
}

// One thread per 4 outputs of a token: the k grouped rows in the order of j.
__global__ void combine_kernel(const float* __restrict__ y, const int32_t* __restrict__ pair_row,
                               const float* __restrict__ weights, int tokens, int top_k, int hidden,
                               float* __restrict__ out) {
  wait_then_allow_next_kernel();
  const int quads = hidden / 4;
  const int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= int64_t(tokens) * quads) return;
  const int t = int(q / quads), c = int(q % quads) * 4;
  float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int j = 0; j < top_k; ++j) {
    const float p = weights[t * top_k + j];
    const float4 v = *reinterpret_cast<const float4*>(y + int64_t(pair_row[t * top_k + j]) * hidden + c);
    sum.x = fmaf(p, v.x, sum.x);
    sum.y = fmaf(p, v.y, sum.y);
    sum.z = fmaf(p, v.z, sum.z);
    sum.w = fmaf(p, v.w, sum.w);
  }
  *reinterpret_cast<float4*>(out + int64_t(t) * hidden + c) = sum;
}

// A lane reads whole chunks of a row (k a multiple of kValues: 8 HALF, 16 Q8_0 and FP8, 32
// the others) and 16-byte vectors of the activations (k a multiple of 8).
template <typename R>
void check_shape(const ExpertShape& s, int32_t k, const char* who) {
  SPARK_CHECK(s.experts >= 1 && s.experts <= kMoeMaxExperts && s.hidden > 0 && s.inter > 0 && s.hidden % 16 == 0 &&
                  s.inter % 16 == 0 && k % R::kValues == 0,
              std::string(who) + ": hidden and inter must be positive multiples of 16 and of the weight format's " +
                  std::to_string(R::kValues) + "-value chunks, experts 1..256");
}

dim3 expert_grid(int32_t rows, const ExpertShape& s, int32_t max_pairs) {
  return dim3(unsigned(ceil_div(rows, kWarps)), unsigned(std::max(1, std::min(s.experts, max_pairs))));
}

}  // namespace

void moe_gate_up_gemv(HalfType type, const ExpertShape& s, const ExpertWeights& w, const MoeGroups& g,
                      const void* x, int32_t max_pairs, void* act, cudaStream_t stream, bool programmatic) {
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    with_weight_reader<T>(w.gate_up, s.inter, s.hidden, [&](auto reader) {
      using R = decltype(reader);
      check_shape<R>(s, s.hidden, "moe_gate_up_gemv");
      const auto kernel = s.gated ? gate_up_gemv_kernel<T, R, true> : gate_up_gemv_kernel<T, R, false>;
      launch_kernel(s.gated ? "gate_up_gemv_kernel" : "gate_up_gemv_kernel<relu2>", programmatic, kernel,
                    expert_grid(s.inter, s, max_pairs), dim3(kThreads), 0, stream, reader, s, w.extras, g,
                    static_cast<const T*>(x), static_cast<T*>(act));
    });
  });
}

void moe_down_gemv(HalfType type, const ExpertShape& s, const ExpertWeights& w, const MoeGroups& g,
                   const void* act, int32_t max_pairs, float* y, cudaStream_t stream, bool programmatic) {
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    with_weight_reader<T>(w.down, s.hidden, s.inter, [&](auto reader) {
      check_shape<decltype(reader)>(s, s.inter, "moe_down_gemv");
      launch_kernel("down_gemv_kernel", programmatic, down_gemv_kernel<T, decltype(reader)>,
                    expert_grid(s.hidden, s, max_pairs), dim3(kThreads), 0, stream, reader, s, w.extras, g,
                    static_cast<const T*>(act), y);
    });
  });
}

void moe_combine(const float* y, const int32_t* pair_row, const float* weights, int32_t tokens, int32_t top_k,
                 int32_t hidden, float* out, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(hidden % 4 == 0 && top_k >= 1, "moe_combine: hidden must be a multiple of 4");
  if (tokens <= 0) return;
  const int64_t threads = int64_t(tokens) * (hidden / 4);
  launch_kernel("combine_kernel", programmatic, combine_kernel, dim3(unsigned(ceil_div(threads, 256))), dim3(256), 0,
                stream, y, pair_row, weights, int(tokens), int(top_k), int(hidden), out);
}

}  // namespace spark::cuda
