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
// scale byte through the read-only cache; the decode places each E2M1 code in an f16
// (weight_readers.cuh's e2m1_word_2m14) and leaves the power-of-two scale to the chunk's
// dot product (decode_folded: one FMA a chunk and row instead of a multiply a weight):
// 3.7 instructions a weight on sm_90, 3.5 on sm_121 with the FMA, load and addressing
// (make kernel-report; 4.66 / 4.53 when each weight was scaled, ~12.7 when it built f32
// bits per code with selects), plus ~1.1 for the activation's conversion and load at B = 1.
// At B = 1 H100's ~3 TB/s is 6e12 weights a second, x ~4.8 = 2.9e13 thread instructions,
// about all of its 132 SMs' issue (4 x 32 a clock at ~1.75 GHz: 3.0e13); GB10's 218 GB/s
// asks ~15% of its 48 SMs'. 2 x 3 x 2880^2 x 4 = 0.2 GFLOP a token a layer. Waves: the
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
// ~5 on H100's 132).
//
// Registers and loads in flight. __launch_bounds__(256, 2) holds a thread to 128
// registers, so an SM keeps 16 warps (2 blocks), with no stack in any instantiation (make
// kernel-report, sm_90 and sm_121: gated gate/up 90..128 registers, ungated and down
// 59..96; the worst were 255 with up to 136 bytes of stack, and 244: 8 warps an SM). What
// a thread holds: kTokens = 16 sums a matrix, one decoded chunk (32 f32 for the 4-bit
// formats, or both matrices' 16 when chunks are of 8 or 16 values) and the raw chunks, the
// current and the next; the activations are read 8 values (one 16-byte load) at a time and
// the 16 rows' offsets come from shared memory, not registers. A gated pass with 32-value
// chunks keeps the gate's 16 sums in shared memory (16 KB a block, 32 KB an SM: Sums
// below), without which ptxas spilled on sm_121. Each warp has its next step's raw chunks
// requested while it decodes and multiplies the current ones (gemv_pass): 512 bytes a
// matrix, so 16 warps keep 16 KB in flight an SM in gate/up (8 KB ungated and in down),
// against Little's law's ~4.5 KB for GB10 (218 GB/s x ~1 us / 48 SMs) and ~18 KB for H100
// (3 TB/s x ~0.8 us / 132); before, 8 warps waited on one chunk a matrix (8 and 4 KB). A
// warp's rows are short (768 to 4,096 bytes in the models above: 1.5 to 8 steps), so at
// block start (after the dependency wait: the expert list is the router's) each lane also
// prefetches its chunks of steps 2 and 3 (1 and up for the pointer readers, whose decode
// does the loads) into L2: one instruction a lane a step, up to 2 KB of each row requested
// at once, so the loads that follow hit L2 instead of waiting on DRAM one step after the
// other. Projected: the experts at the bytes' floor on both devices (~170 steps/s for
// gpt-oss-20b's experts on GB10 at B = 1, ~110 for Qwen3-30B-A3B Q8_0); not yet measured.
#include <algorithm>
#include <type_traits>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/moe_activation.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/weight_readers.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMinBlocks = 2;       // 16 warps an SM: ptxas keeps a thread to 128 registers
constexpr int kTokens = 16;         // rows a warp multiplies per pass over its weight rows
constexpr int kPrefetchSteps = 4;   // warp steps of each weight row prefetched to L2 at block start

// Expert `a`-th active or -1.
__device__ __forceinline__ int active_expert(const MoeGroups& g, int experts, int a) {
  return a < g.active[experts] ? g.active[a] : -1;
}

// The lane's chunks of row r in the warp steps the loop's first loads do not cover (1 and
// up; 2 and up where a chunk is loaded a step ahead) up to kPrefetchSteps, into L2.
template <typename R>
__device__ __forceinline__ void prefetch_row(const R& w, int64_t r, int k, int lane) {
  constexpr int V = R::kValues;
  constexpr int kFirst = std::is_pointer_v<typename R::Chunk> ? 1 : 2;
#pragma unroll
  for (int step = kFirst; step < kPrefetchSteps; ++step) {
    const int c = (step * 32 + lane) * V;
    if (c < k) prefetch_l2(w.at(r, c));
  }
}

// A warp pass's sums: sum(m, j) of matrix m and activation row j. In registers, except
// matrix 0's of a gated pass with 32-value chunks (kShared0), which sit in shared memory,
// [j][thread] (each thread its own column: no barrier, no bank conflict), while the other
// matrix's chunk is multiplied: with both sets in registers beside a decoded chunk ptxas
// spilled on sm_121. At B = 1 that is one shared load and store a chunk, against its 64
// FMAs; at 16 rows, 16 of each against 1,024.
template <bool kShared0>
struct Sums {
  float reg[2][kTokens];
  float (*shared0)[kThreads];  // [kTokens][kThreads] where kShared0
  __device__ __forceinline__ float& operator()(int m, int j) {
    if constexpr (kShared0)
      if (m == 0) return shared0[j][threadIdx.x];
    return reg[m][j];
  }
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int j = 0; j < kTokens; ++j) (*this)(0, j) = 0.0f, (*this)(1, j) = 0.0f;
  }
};

// Adds the dot products of M decoded chunks (wv[m], factor f[m]: decode_folded) at column c
// with the nb activation rows x + off[j] (element offsets; volatile, so that the compiler
// reads them each time instead of keeping 16 row pointers in registers) into sum(A + m, j).
template <typename T, typename R, int M, int A, typename S>
__device__ __forceinline__ void consume(const float (&wv)[M][R::kValues], const float (&f)[M], const T* __restrict__ x,
                                        const volatile int64_t* off, int c, int nb, S& sum) {
  constexpr int V = R::kValues;
#pragma unroll
  for (int j = 0; j < kTokens; ++j) {
    if (j < nb) {
      const uint4* xp = reinterpret_cast<const uint4*>(x + off[j] + c);
      float dot[M];
#pragma unroll
      for (int m = 0; m < M; ++m) dot[m] = FoldsFactor<R> ? 0.0f : sum(A + m, j);
#pragma unroll
      for (int h = 0; h < V / 8; ++h) {
        const uint4 raw = __ldg(xp + h);
        const T* xs = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float xv = to_f32(xs[i]);
#pragma unroll
          for (int m = 0; m < M; ++m) dot[m] = fmaf(wv[m][8 * h + i], xv, dot[m]);
        }
      }
#pragma unroll
      for (int m = 0; m < M; ++m) sum(A + m, j) = FoldsFactor<R> ? fmaf(dot[m], f[m], sum(A + m, j)) : dot[m];
    }
  }
}

// Whether a pass over M matrices of R keeps matrix 0's sums in shared memory (Sums).
template <typename R, int M>
constexpr bool kSharedGate = M == 2 && R::kValues == 32;

// One pass of a warp over its M weight rows r[m] (k values each) against nb activation rows,
// into sum(m, j). Lane l takes chunks l, l + 32, ... (a warp step: 32 contiguous chunks).
// A reader with raw chunks (HALF, Q8_0, FP8, MXFP4) has the next step's chunks requested
// before the current ones are decoded and multiplied; a pointer chunk's decode does its own
// loads (BlockRows, NVFP4), which prefetch_row put in L2. Two matrices with chunks of at
// most 16 values are decoded together and read each activation once; with 32-value chunks
// one after the other, each reading the activations (L1) again, so that a thread holds one
// decoded chunk at a time.
template <typename T, typename R, int M, typename S>
__device__ __forceinline__ void gemv_pass(const R& w, const int64_t (&r)[M], int k, int lane, const T* __restrict__ x,
                                          const volatile int64_t* off, int nb, S& sum) {
  constexpr int V = R::kValues;
  constexpr bool kLoadAhead = !std::is_pointer_v<typename R::Chunk>;
  constexpr bool kTogether = M * V <= 32;
  using Chunk = typename R::Chunk;
  int c = lane * V;
  Chunk q[M];
  if constexpr (kLoadAhead)
    if (c < k)
#pragma unroll
      for (int m = 0; m < M; ++m) q[m] = w.load(r[m], c);
  for (; c < k; c += 32 * V) {
    const bool more = c + 32 * V < k;
    if constexpr (kTogether) {
      Chunk next[M];
      if constexpr (kLoadAhead)
        if (more)
#pragma unroll
          for (int m = 0; m < M; ++m) next[m] = w.load(r[m], c + 32 * V);
      float wv[M][V], f[M];
#pragma unroll
      for (int m = 0; m < M; ++m) f[m] = decode_folded(w, kLoadAhead ? q[m] : w.load(r[m], c), r[m], c, wv[m]);
      consume<T, R, M, 0>(wv, f, x, off, c, nb, sum);
      if constexpr (kLoadAhead)
#pragma unroll
        for (int m = 0; m < M; ++m) q[m] = next[m];
    } else {
      // Matrix m's next chunk is requested just before its current one is decoded: a
      // thread holds 2 raw chunks at a time, not 2 x M.
#pragma unroll
      for (int m = 0; m < M; ++m) {
        Chunk next{};
        if constexpr (kLoadAhead)
          if (more) next = w.load(r[m], c + 32 * V);
        float wv[1][V], f[1];
        f[0] = decode_folded(w, kLoadAhead ? q[m] : w.load(r[m], c), r[m], c, wv[0]);
        if (m == 0) consume<T, R, 1, 0>(wv, f, x, off, c, nb, sum);
        else consume<T, R, 1, M - 1>(wv, f, x, off, c, nb, sum);
        if constexpr (kLoadAhead) q[m] = next;
      }
    }
  }
}

// kGated: gate row i and up row i of expert e (stack rows e * 2 * inter + i and + inter),
// SwiGLU; else up row i alone (stack row e * inter + i), relu(up)^2.
template <typename T, typename R, bool kGated>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    gate_up_gemv_kernel(R w, ExpertShape s, ExpertExtras ex, MoeGroups g, const T* __restrict__ x,
                        T* __restrict__ act) {
  constexpr int M = kGated ? 2 : 1;
  constexpr bool kShared0 = kSharedGate<R, M>;
  __shared__ int64_t row_offset[kWarps][kTokens];  // each warp's activation rows: token x hidden
  Sums<kShared0> sum;
  if constexpr (kShared0) {
    __shared__ float gate_sums[kTokens][kThreads];
    sum.shared0 = gate_sums;
  }
  wait_then_allow_next_kernel();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int e = active_expert(g, s.experts, blockIdx.y);
  const int i = blockIdx.x * kWarps + warp;
  if (e < 0 || i >= s.inter) return;
  const int64_t up_r = kGated ? int64_t(e) * 2 * s.inter + s.inter + i : int64_t(e) * s.inter + i;
  const int64_t gate_r = up_r - s.inter;  // kGated only
  int64_t r[M];
  r[0] = kGated ? gate_r : up_r;
  if constexpr (kGated) r[M - 1] = up_r;
  const int row0 = g.offsets[e], rows = g.offsets[e + 1] - row0;
  const int k = s.hidden;
#pragma unroll
  for (int m = 0; m < M; ++m) prefetch_row(w, r[m], k, lane);
  for (int b0 = 0; b0 < rows; b0 += kTokens) {
    const int nb = min(kTokens, rows - b0);
    __syncwarp();
    if (lane < nb) row_offset[warp][lane] = int64_t(g.row_token[row0 + b0 + lane]) * k;
    __syncwarp();
    sum.clear();
    gemv_pass<T, R, M>(w, r, k, lane, x, row_offset[warp], nb, sum);
#pragma unroll
    for (int j = 0; j < kTokens; ++j) {
      if (j < nb) {
        const float up = warp_sum(sum(M - 1, j)) * row_scale(w, up_r);
        float a;
        if constexpr (kGated) a = expert_swiglu(ex, gate_r, up_r, warp_sum(sum(0, j)) * row_scale(w, gate_r), up);
        else a = expert_relu2(ex, up_r, up);
        if (lane == 0) act[int64_t(row0 + b0 + j) * s.inter + i] = from_f32<T>(a);
      }
    }
  }
}

template <typename T, typename R>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    down_gemv_kernel(R w, ExpertShape s, ExpertExtras ex, MoeGroups g, const T* __restrict__ act,
                     float* __restrict__ y) {
  __shared__ int64_t row_offset[kWarps][kTokens];  // each warp's activation rows: row x inter
  wait_then_allow_next_kernel();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int e = active_expert(g, s.experts, blockIdx.y);
  const int n = blockIdx.x * kWarps + warp;
  if (e < 0 || n >= s.hidden) return;
  const int64_t r[1] = {int64_t(e) * s.hidden + n};
  const int row0 = g.offsets[e], rows = g.offsets[e + 1] - row0;
  const int k = s.inter;
  prefetch_row(w, r[0], k, lane);
  Sums<false> sum;
  for (int b0 = 0; b0 < rows; b0 += kTokens) {
    const int nb = min(kTokens, rows - b0);
    __syncwarp();
    if (lane < nb) row_offset[warp][lane] = int64_t(row0 + b0 + lane) * k;
    __syncwarp();
    sum.clear();
    gemv_pass<T, R, 1>(w, r, k, lane, act, row_offset[warp], nb, sum);
#pragma unroll
    for (int j = 0; j < kTokens; ++j) {
      if (j < nb) {
        const float y_j = warp_sum(sum(0, j)) * row_scale(w, r[0]);
        if (lane == 0) y[int64_t(row0 + b0 + j) * s.hidden + n] = expert_down_out(ex, r[0], y_j);
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
