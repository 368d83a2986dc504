// mamba2.cu — the Mamba-2 token mixer (mamba2.h) in four kernels: the causal conv1d with
// bias + SiLU over x|B|C, the selective state update token by token for short sequences
// (decode, speculative verification) and in chunks for long ones, the grouped gated
// RMSNorm.
//
// Decode is the case to be fast, and it is bound by the recurrent state: at
// Nemotron-3-Nano's shape (64 heads of head_dim 64, 8 groups, state_size 128, conv_kernel
// 4: inner 4096, conv_dim 6144) one sequence's step of one layer moves
//   state matrices  64 x 64 x 128 x 4 B = 2 MiB read + 2 MiB written
//   conv state      6144 x 3 x 4 B      = 72 KiB read + 72 KiB written
//   proj            the conv reads and writes x|B|C, 24 KiB each way; the state update
//                   reads x 16 KiB, its group's B and C 8 KiB and dt 256 B, writes y
//                   16 KiB (over x); the norm reads y and z 32 KiB and writes out 8 KiB
//   weights         conv 96 KiB, conv bias 24 KiB, norm 16 KiB once per batch
// so ~4.3 MiB besides the weights, 94% of it the state matrices (check_mamba2's byte rows
// count the reads: 4537 KiB for two sequences, the formula's to 0.01%). The arithmetic is 5 flops a state element
// (decay, the rank-1 update dt x B^T, S C): 2.6 MFLOP against 4.3 MiB, under 1 flop a
// byte: the floor is the bytes (~20 us a sequence-layer at GB10's ~218 GB/s). Each state
// element is therefore read once and written once a call, kept in a register across the
// sequence's rows, and its fetch is issued before the kernel waits for the conv
// (ssm_kernel).
//
// A prefill chunk is the other way round. N rows of one sequence move the state once (the
// prefill byte rows: 26332 KiB read for 300 rows, the formula's to 0.01%) but 80 KiB of
// proj a row, and the recurrence runs them as N dependent steps, each a round
// trip for the row's x, B, C and dt and 4 warp sums a warp. Sequences with at least
// kChunkMinRows rows in the call take the chunked SSD scan (ssd_chunk_kernel): with L_t
// the cumulative log-decay within a chunk of C = 32 rows and S_0 the state before it,
//   y_t = sum_{s<=t} exp(L_t - L_s) (C_t . B_s) dt_s x_s + exp(L_t) S_0 C_t + D x_t
//   S_C = exp(L_C) S_0 + sum_s exp(L_C - L_s) dt_s x_s B_s^T
// so the chunk's loads are issued at once and its products are independent FMAs, 3
// barriers a chunk. Its f32 arithmetic a row and head at that shape, a block taking 32
// of the head's 64 channels:
//   C_t . B_s, each of the 2 blocks all 32 pairs of the row     2 x 32 N   = 8 K FMA
//   S_0 C_t                                                      hd N       = 8 K FMA
//   the chunk's own rows, sum_s M_ts x_s                         ~C/2 hd    = 1 K FMA
//   the state's update                                           hd N       = 8 K FMA
// ~25 K FMA against the recurrence's ~25 K flops (decay, rank-1 update, S C: 3 hd N):
// the same arithmetic, traded for latency (no dependent step a row). Tensor cores for
// the C x N by N x C and N x C by C x 32 products are the next step.
#include <algorithm>
#include <atomic>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/mamba2.h"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/recurrent_mixer.cuh"

namespace spark::cuda {
namespace {

using namespace recurrent;  // the pieces the recurrent mixers share

constexpr int kSsmWarps = 4;
constexpr int kSsmRowsPerWarp = 4;  // state rows (head channels) a warp holds
constexpr int kSsmRowsPerBlock = kSsmWarps * kSsmRowsPerWarp;
constexpr int kNormThreads = 128;
constexpr int kNormValuesPerThread = kMamba2MaxGroupSize / kNormThreads;
constexpr int kChunkWarps = 8;
constexpr int kChunk = 32;                // rows a chunk: a lane per row s in the C_t . B_s products
constexpr int kChunkSlice = 32;           // head channels (state rows) a block: a lane per channel
constexpr int kChunkStride = kChunk + 1;  // shared rows of 33 floats: no bank conflicts across rows
constexpr int kChunkRowsPerWarp = kChunk / kChunkWarps;
// A sequence with at least this many rows in a call takes the chunked form; decode and
// short verification steps keep the recurrence. A guess without GPU timings, delta_net's:
// at 16 rows the chunk's 3 barriers replace 16 dependent steps.
constexpr int32_t kChunkMinRows = 16;
std::atomic<int32_t> g_chunk_min_rows{kChunkMinRows};

// ssd_chunk_kernel's dynamic shared memory for state_size N: L (doubles), then dt_s,
// rest_s, x_s, m_s, b_s, s_s.
size_t chunk_smem_bytes(int32_t N) {
  return sizeof(double) * kChunk +
         sizeof(float) * (2 * size_t(kChunk) + 2 * size_t(kChunk) * kChunkStride + 2 * size_t(N) * kChunkStride);
}

struct SsmArgs {
  float* proj;  // conv output in its x|B|C columns; y written over x
  const float* neg_exp_a;
  const float* d;
  const float* dt_bias;
  RecurrentStates st;
  const int32_t* query_start;
  const int32_t* positions;
  int64_t row_stride;         // proj's: inner + conv_dim + num_heads
  int64_t conv_state_values;  // floats before the matrices in a layer's state
  int32_t num_heads, head_dim, n_groups, state_size;
  int32_t num_seqs;
  int32_t chunk_min_rows;  // sequences with at least this many rows take ssd_chunk_kernel
  float dt_min, dt_max;
};

// Where head h reads in a proj row (x | B | C | dt after the z columns): its first channel's
// x (then y), its group's B and C, its dt.
struct HeadColumns {
  int64_t x, b, c, dt;
};
__device__ __forceinline__ HeadColumns head_columns(const SsmArgs& p, int h) {
  const int64_t inner = int64_t(p.num_heads) * p.head_dim, N = p.state_size;
  const int g = h / (p.num_heads / p.n_groups);
  const int64_t b = 2 * inner + int64_t(g) * N;
  return {inner + int64_t(h) * p.head_dim, b, b + int64_t(p.n_groups) * N, 2 * inner + 2 * int64_t(p.n_groups) * N + h};
}

// dt = clamp(softplus(dt_raw + dt_bias)), as cpu::mamba2 has it.
__device__ __forceinline__ float clamped_dt(float raw, float dt_bias, const SsmArgs& p) {
  float dt = fmaxf(softplus(raw + dt_bias), p.dt_min);
  if (p.dt_max > 0.0f) dt = fminf(dt, p.dt_max);
  return dt;
}

// The selective state update, per head and row of the sequence:
//   dt = clamp(softplus(dt_raw + dt_bias));  S = S exp(dt A) + dt x B^T;  y = S C + D x
// with x the head's head_dim channels and B, C (state_size each) its group's. Rows of S
// (head channels p) are independent given dt, B, C: a block takes kSsmRowsPerBlock rows of
// one head of one sequence, a warp kSsmRowsPerWarp of them, and lane l keeps columns
// l, l + 32, .. (NJ of them) of its rows in registers for all the sequence's rows, reads
// them once and writes them once (a warp reads 32 adjacent floats of a row: coalesced).
// S C is a warp sum per row. y goes over x in proj: each x value is read (by lane j of
// the warp that owns its row, then shuffled) before that warp writes its y.
// The conv kernel ahead writes proj's x|B|C and the conv state only, so the matrices (and
// the slots, query_start, positions) are loaded before grid_dependency_wait: under a
// programmatic launch the state's fetch overlaps the conv.
template <int NJ>
__global__ void __launch_bounds__(32 * kSsmWarps) ssm_kernel(SsmArgs p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int seq = blockIdx.z, h = blockIdx.y;
  const int row0 = blockIdx.x * kSsmRowsPerBlock + warp * kSsmRowsPerWarp;  // this warp's first state row
  const int N = p.state_size;

  const int32_t r0 = __ldg(p.query_start + seq), r1 = __ldg(p.query_start + seq + 1);
  // Long sequences are ssd_chunk_kernel's: their states are not read here.
  float* const state = r1 - r0 < p.chunk_min_rows ? layer_state(p.st, seq, p.query_start) : nullptr;
  float* const matrix = state ? state + p.conv_state_values + int64_t(h) * p.head_dim * N : nullptr;
  const bool load = state && __ldg(p.positions + r0) != 0;  // position 0: a zero state
  float m[kSsmRowsPerWarp][NJ];
#pragma unroll
  for (int i = 0; i < kSsmRowsPerWarp; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int row = row0 + i, n = lane + 32 * j;
      m[i][j] = load && row < p.head_dim && n < N ? load_once(matrix + int64_t(row) * N + n) : 0.0f;
    }
  wait_then_allow_next_kernel();
  if (!state || row0 >= p.head_dim) return;  // uniform over the warp

  const HeadColumns cols = head_columns(p, h);
  const int64_t x_col = cols.x + row0, b_col = cols.b, c_col = cols.c, dt_col = cols.dt;  // x: this warp's rows'
  const float neg_exp_a = __ldg(p.neg_exp_a + h), d_skip = __ldg(p.d + h), dt_bias = __ldg(p.dt_bias + h);
  const bool has_x = lane < kSsmRowsPerWarp && row0 + lane < p.head_dim;
  for (int64_t r = r0; r < r1; ++r) {
    float* row = p.proj + r * p.row_stride;
    const float dt = clamped_dt(__ldg(row + dt_col), dt_bias, p);
    const float decay = expf(dt * neg_exp_a);
    float b[NJ], c[NJ];
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int n = lane + 32 * j;
      b[j] = n < N ? __ldg(row + b_col + n) : 0.0f;
      c[j] = n < N ? __ldg(row + c_col + n) : 0.0f;
    }
    const float x_mine = has_x ? load_once(row + x_col + lane) : 0.0f;
    float y_mine = 0.0f;
#pragma unroll
    for (int i = 0; i < kSsmRowsPerWarp; ++i) {
      const float x = __shfl_sync(0xffffffffu, x_mine, i);
      const float dx = dt * x;
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        m[i][j] = m[i][j] * decay + dx * b[j];
        acc += m[i][j] * c[j];
      }
      acc = warp_sum(acc);
      if (lane == i) y_mine = acc + d_skip * x;
    }
    if (has_x) row[x_col + lane] = y_mine;
  }
#pragma unroll
  for (int i = 0; i < kSsmRowsPerWarp; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int row = row0 + i, n = lane + 32 * j;
      if (row < p.head_dim && n < N) __stcs(matrix + int64_t(row) * N + n, m[i][j]);
    }
}

// The chunked form of the same update, for sequences with many rows this step (prefill
// chunks). Within a chunk of n <= C rows, with a_t = dt_t A the row's log-decay, L_t =
// a_1 + .. + a_t and S_0 the state before the chunk, unrolling the recurrence gives
//   S_t = exp(L_t) S_0 + sum_{s<=t} exp(L_t - L_s) dt_s x_s B_s^T
//   y_t = S_t C_t + D x_t = exp(L_t) S_0 C_t + sum_{s<=t} M_ts x_s + D x_t,
//   M_ts = exp(L_t - L_s) (C_t . B_s) dt_s.
// Only exponents with s <= t occur: each is <= 0, so nothing overflows. L is summed in
// double, as delta_chunk_kernel's G: with strong decays (dt past softplus's threshold, |A|
// of a few) |L| reaches thousands within a chunk, where a float's L_t - L_s would lose the
// digits that matter.
// Rows of S (head channels p) are independent given dt, B, C: a block takes kChunkSlice
// channels of one head of one long sequence and walks its chunks in order, with its rows
// of the state in shared memory (read once, written once). Lane p owns channel p, lane s
// row s of the chunk; per chunk:
//   1. x (the block's channels) and B into shared memory, column-major; warp 0: dt, L's
//      prefix sum and exp(L_n - L_s) dt_s;
//   2. warp w takes rows t = w, w + 8, .. : C_t . B_s (lane s) and S_0 C_t (lane p) in one
//      pass over the state columns, C_t read from proj (the same address for the warp);
//      M_ts into m_s, then y_t over x in proj (x is in x_s already);
//   3. the state's update in place, a thread its channel of the columns n = w, w + 8, ..
//      (the rows' weighted x in registers).
// The C_t . B_s products are recomputed by each of a head's head_dim / 32 blocks; f32
// FMAs, a first version. Shared memory: chunk_smem_bytes, 42 KiB at N = 128 (two blocks an
// SM on sm_121's 100 KiB) and 75 KiB at N = 256, within sm_121's opt-in 99 KiB.
__global__ void __launch_bounds__(32 * kChunkWarps, 2) ssd_chunk_kernel(SsmArgs p) {
  extern __shared__ double chunk_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y, p0 = blockIdx.x * kChunkSlice;
  const int N = p.state_size, rows = min(kChunkSlice, p.head_dim - p0);  // the block's channels
  // Block z takes the batch's z-th sequence of at least chunk_min_rows rows (-1: none).
  // The grid has only num_tokens / chunk_min_rows of them, so that a decode batch of many
  // sequences launches few blocks here.
  int seq = -1;
  for (int s = 0, found = 0; s < p.num_seqs; ++s)
    if (__ldg(p.query_start + s + 1) - __ldg(p.query_start + s) >= p.chunk_min_rows && found++ == int(blockIdx.z)) {
      seq = s;
      break;
    }
  double* const L_s = chunk_smem;                              // [C]
  float* const dt_s = reinterpret_cast<float*>(L_s + kChunk);  // [C]
  float* const rest_s = dt_s + kChunk;                         // [C]: exp(L_n - L_s) dt_s
  float* const x_s = rest_s + kChunk;                          // [C][33]: x_s[p] at [s][p]
  float* const m_s = x_s + kChunk * kChunkStride;              // [C][33]: M_ts at [t][s]
  float* const b_s = m_s + kChunk * kChunkStride;              // [N][33]: B_s[n] at [n][s]
  float* const s_s = b_s + N * kChunkStride;                   // [N][33]: S[p][n] at [n][p]

  const int32_t r0 = seq < 0 ? 0 : __ldg(p.query_start + seq), r1 = seq < 0 ? 0 : __ldg(p.query_start + seq + 1);
  float* const state = seq < 0 ? nullptr : layer_state(p.st, seq, p.query_start);
  // The block's rows of the head's matrix: rows x N floats in a row.
  float* const slice = state ? state + p.conv_state_values + (int64_t(h) * p.head_dim + p0) * N : nullptr;
  const bool load = state && __ldg(p.positions + r0) != 0;  // position 0: a zero state
  for (int i = threadIdx.x; i < kChunkSlice * N; i += blockDim.x) {
    const int row = i / N, n = i - row * N;
    s_s[n * kChunkStride + row] = load && row < rows ? load_once(slice + i) : 0.0f;
  }
  wait_then_allow_next_kernel();
  if (!state) return;  // uniform over the block

  const HeadColumns cols = head_columns(p, h);
  const int64_t x_col = cols.x + p0, b_col = cols.b, c_col = cols.c, dt_col = cols.dt;  // x: the block's channels'
  const float neg_exp_a = __ldg(p.neg_exp_a + h), d_skip = __ldg(p.d + h), dt_bias = __ldg(p.dt_bias + h);
  for (int64_t base = r0; base < r1; base += kChunk) {
    const int n_rows = int(r1 - base < kChunk ? r1 - base : kChunk);
    for (int i = threadIdx.x; i < kChunk * kChunkSlice; i += blockDim.x) {
      const int s = i / kChunkSlice, c = i % kChunkSlice;
      x_s[s * kChunkStride + c] =
          s < n_rows && c < rows ? load_once(p.proj + (base + s) * p.row_stride + x_col + c) : 0.0f;
    }
    for (int i = threadIdx.x; i < kChunk * N; i += blockDim.x) {
      const int s = i / N, n = i - s * N;
      b_s[n * kChunkStride + s] = s < n_rows ? __ldg(p.proj + (base + s) * p.row_stride + b_col + n) : 0.0f;
    }
    if (warp == 0) {
      const float dt =
          lane < n_rows ? clamped_dt(__ldg(p.proj + (base + lane) * p.row_stride + dt_col), dt_bias, p) : 0.0f;
      dt_s[lane] = dt;
      L_s[lane] = double(dt * neg_exp_a);  // rows past n_rows add 0
      __syncwarp();
      if (lane == 0)
        for (int t = 1; t < kChunk; ++t) L_s[t] += L_s[t - 1];
      __syncwarp();
      rest_s[lane] = lane < n_rows ? expf(float(L_s[n_rows - 1] - L_s[lane])) * dt : 0.0f;
    }
    __syncthreads();

    float cb[kChunkRowsPerWarp], sc[kChunkRowsPerWarp];
    if (warp < n_rows) {                      // uniform over the warp
      const float* c_row[kChunkRowsPerWarp];  // rows t past the chunk read its last row, unused
#pragma unroll
      for (int k = 0; k < kChunkRowsPerWarp; ++k) {
        cb[k] = sc[k] = 0.0f;
        c_row[k] = p.proj + (base + min(warp + k * kChunkWarps, n_rows - 1)) * p.row_stride + c_col;
      }
      for (int n = 0; n < N; ++n) {
        const float b = b_s[n * kChunkStride + lane], sv = s_s[n * kChunkStride + lane];
#pragma unroll
        for (int k = 0; k < kChunkRowsPerWarp; ++k) {
          const float c = __ldg(c_row[k] + n);
          cb[k] += c * b;
          sc[k] += c * sv;
        }
      }
#pragma unroll
      for (int k = 0; k < kChunkRowsPerWarp; ++k) {
        const int t = warp + k * kChunkWarps;
        if (t < n_rows)
          m_s[t * kChunkStride + lane] = lane <= t ? cb[k] * expf(float(L_s[t] - L_s[lane])) * dt_s[lane] : 0.0f;
      }
      __syncwarp();  // a warp reads only its own rows of m_s
#pragma unroll
      for (int k = 0; k < kChunkRowsPerWarp; ++k) {
        const int t = warp + k * kChunkWarps;
        if (t >= n_rows) break;
        float y = expf(float(L_s[t])) * sc[k] + d_skip * x_s[t * kChunkStride + lane];
        for (int s = 0; s <= t; ++s) y += m_s[t * kChunkStride + s] * x_s[s * kChunkStride + lane];
        if (lane < rows) p.proj[(base + t) * p.row_stride + x_col + lane] = y;
      }
    }
    __syncthreads();  // every read of S_0 is done

    const float decay_all = expf(float(L_s[n_rows - 1]));
    float wx[kChunk];  // exp(L_n - L_s) dt_s x_s[p], zero past the chunk's rows
#pragma unroll
    for (int s = 0; s < kChunk; ++s) wx[s] = rest_s[s] * x_s[s * kChunkStride + lane];
    for (int n = warp; n < N; n += kChunkWarps) {
      float acc = decay_all * s_s[n * kChunkStride + lane];
#pragma unroll
      for (int s = 0; s < kChunk; ++s) acc += wx[s] * b_s[n * kChunkStride + s];
      s_s[n * kChunkStride + lane] = acc;
    }
    __syncthreads();  // the next chunk overwrites x_s, b_s, L_s, m_s
  }
  for (int i = threadIdx.x; i < rows * N; i += blockDim.x) {
    const int row = i / N, n = i - row * N;
    __stcs(slice + i, s_s[n * kChunkStride + row]);
  }
}

// The grouped gated RMSNorm, a block per (row, group): g = y * silu(z), out =
// g / rms(g) * weight over the group's channels, rounded to T. Rows of padding sequences,
// and rows past the batch's last sequence, get zeros: their y was never computed. A row
// finds its sequence by binary search over query_start.
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    gated_norm_kernel(const float* __restrict__ proj, const float* __restrict__ weight,
                      const int32_t* __restrict__ slots, const int32_t* __restrict__ query_start, int32_t num_seqs,
                      int32_t num_tokens, int32_t n_groups, int32_t group_size, int64_t row_stride, float eps,
                      T* __restrict__ out) {
  __shared__ float scratch[32];
  wait_then_allow_next_kernel();
  const int64_t t = blockIdx.x / n_groups, g = blockIdx.x % n_groups;
  if (t >= num_tokens) return;  // uniform over the block
  const int64_t inner = int64_t(n_groups) * group_size;
  const bool active = row_is_live(t, slots, query_start, num_seqs);
  T* dst = out + t * inner + g * group_size;
  if (!active) {  // uniform over the block
    for (int i = threadIdx.x; i < group_size; i += kNormThreads) dst[i] = from_f32<T>(0.0f);
    return;
  }
  const float* z_row = proj + t * row_stride + g * group_size;
  const float* y_row = proj + t * row_stride + inner + g * group_size;
  float v[kNormValuesPerThread];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kNormValuesPerThread; ++k) {
    const int i = threadIdx.x + kNormThreads * k;
    v[k] = 0.0f;
    if (i < group_size) {
      const float z = __ldg(z_row + i);
      v[k] = load_once(y_row + i) * (z * sigmoid(z));
    }
    sum_sq += v[k] * v[k];
  }
  const float inv = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(group_size) + eps);
#pragma unroll
  for (int k = 0; k < kNormValuesPerThread; ++k) {
    const int i = threadIdx.x + kNormThreads * k;
    if (i < group_size) dst[i] = from_f32<T>(v[k] * inv * __ldg(weight + g * group_size + i));
  }
}

}  // namespace

template <typename T>
void mamba2_mix(const Mamba2Shape& m, const Mamba2LayerWeights& w, const RecurrentStates& states,
                const int32_t* query_start, const int32_t* positions, int32_t num_seqs, int32_t num_tokens, float* proj,
                T* out, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(num_seqs >= 0 && num_tokens >= 0, "mamba2_mix: negative num_seqs or num_tokens");
  SPARK_CHECK(num_seqs <= 65535, "mamba2_mix: at most 65535 sequences a call");
  SPARK_CHECK(m.num_heads > 0 && m.n_groups > 0 && m.num_heads % m.n_groups == 0,
              "mamba2_mix: num_heads must be a positive multiple of n_groups");
  SPARK_CHECK(m.num_heads <= 65535, "mamba2_mix: at most 65535 heads");
  SPARK_CHECK(m.head_dim >= 1 && m.head_dim <= kMamba2MaxHeadDim, "mamba2_mix: head_dim must be in [1, 1024]");
  SPARK_CHECK(m.state_size >= 1 && m.state_size <= kMamba2MaxStateSize, "mamba2_mix: state_size must be in [1, 256]");
  SPARK_CHECK(m.conv_kernel >= 1 && m.conv_kernel <= kMamba2MaxConvKernel, "mamba2_mix: conv_kernel must be in [1, 8]");
  SPARK_CHECK(m.inner() / m.n_groups <= kMamba2MaxGroupSize,
              "mamba2_mix: a norm group must have at most 4096 channels");
  SPARK_CHECK(m.conv_dim() <= INT32_MAX, "mamba2_mix: conv_dim too large");
  if (num_tokens == 0) return;
  SPARK_CHECK(proj && out && query_start && positions, "mamba2_mix: a null activation pointer");
  SPARK_CHECK(w.conv && w.neg_exp_a && w.d && w.dt_bias && w.norm, "mamba2_mix: a null weight pointer");
  SPARK_CHECK(num_seqs == 0 || (states.base && states.slots), "mamba2_mix: null states or slots");
  SPARK_CHECK(states.layer_offset >= 0 && states.slot_stride >= states.layer_offset + m.state_values(),
              "mamba2_mix: the layer's state must lie inside its slot (slot_stride >= layer_offset + state_values)");

  const int64_t row_stride = m.in_proj_rows();
  if (num_seqs > 0) {
    recurrent::conv_silu(proj, row_stride, m.inner(), int32_t(m.conv_dim()), w.conv, w.conv_bias, m.conv_kernel, states,
                         query_start, positions, num_seqs, stream, programmatic);

    SsmArgs args;
    args.proj = proj;
    args.neg_exp_a = w.neg_exp_a;
    args.d = w.d;
    args.dt_bias = w.dt_bias;
    args.st = states;
    args.query_start = query_start;
    args.positions = positions;
    args.row_stride = row_stride;
    args.conv_state_values = m.conv_dim() * (m.conv_kernel - 1);
    args.num_heads = m.num_heads;
    args.head_dim = m.head_dim;
    args.n_groups = m.n_groups;
    args.state_size = m.state_size;
    args.num_seqs = num_seqs;
    args.chunk_min_rows = g_chunk_min_rows.load();
    args.dt_min = m.dt_min;
    args.dt_max = m.dt_max;
    const dim3 grid(unsigned(ceil_div(m.head_dim, kSsmRowsPerBlock)), unsigned(m.num_heads), unsigned(num_seqs));
    const dim3 block(32 * kSsmWarps);
    // NJ state columns a lane: the smallest power of two with 32 NJ >= state_size.
    const int32_t per_lane = ceil_div(m.state_size, 32);
    if (per_lane <= 1)
      launch_kernel("ssm_kernel", programmatic, ssm_kernel<1>, grid, block, 0, stream, args);
    else if (per_lane <= 2)
      launch_kernel("ssm_kernel", programmatic, ssm_kernel<2>, grid, block, 0, stream, args);
    else if (per_lane <= 4)
      launch_kernel("ssm_kernel", programmatic, ssm_kernel<4>, grid, block, 0, stream, args);
    else
      launch_kernel("ssm_kernel", programmatic, ssm_kernel<8>, grid, block, 0, stream, args);
    // At most num_tokens / chunk_min_rows sequences can be long: a block row (z) for each,
    // none at all for a batch of fewer rows.
    const int32_t long_seqs = std::min(num_seqs, num_tokens / args.chunk_min_rows);
    if (long_seqs > 0) {
      const size_t smem = chunk_smem_bytes(m.state_size);
      CUDA_CHECK(cudaFuncSetAttribute(ssd_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      launch_kernel("ssd_chunk_kernel", programmatic, ssd_chunk_kernel,
                    dim3(unsigned(ceil_div(m.head_dim, kChunkSlice)), unsigned(m.num_heads), unsigned(long_seqs)),
                    dim3(32 * kChunkWarps), smem, stream, args);
    }
  }

  const int64_t blocks = int64_t(num_tokens) * m.n_groups;
  SPARK_CHECK(blocks <= INT32_MAX, "mamba2_mix: too many (row, group) pairs");
  launch_kernel("gated_norm_kernel", programmatic, gated_norm_kernel<T>, dim3(unsigned(blocks)), dim3(kNormThreads), 0,
                stream, proj, w.norm, states.slots, query_start, num_seqs, num_tokens, m.n_groups,
                int32_t(m.inner() / m.n_groups), row_stride, m.eps, out);
}

int32_t mamba2_set_chunk_min_rows(int32_t rows) { return g_chunk_min_rows.exchange(rows < 1 ? 1 : rows); }

template void mamba2_mix<bf16>(const Mamba2Shape&, const Mamba2LayerWeights&, const RecurrentStates&, const int32_t*,
                               const int32_t*, int32_t, int32_t, float*, bf16*, cudaStream_t, bool);
template void mamba2_mix<f16>(const Mamba2Shape&, const Mamba2LayerWeights&, const RecurrentStates&, const int32_t*,
                              const int32_t*, int32_t, int32_t, float*, f16*, cudaStream_t, bool);

}  // namespace spark::cuda
