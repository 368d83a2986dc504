// delta_net.cu — the Gated DeltaNet token mixer (delta_net.h) in four kernels: the causal
// conv1d + SiLU, the gated delta rule (with the L2 norm of q and k) token by token for
// short sequences and in chunks for long ones, the gated RMSNorm.
//
// Decode is the case to be fast, and it is bound by the recurrent state: at
// Qwen3.6-35B-A3B's shape (16/32 heads of 128 x 128, conv_kernel 4, conv_dim 8192) one
// sequence's step of one layer moves
//   state matrices  32 x 128 x 128 x 4 B = 2 MiB read + 2 MiB written
//   conv state      8192 x 3 x 4 B      = 96 KiB read + 96 KiB written
//   qkv             32 KiB read + written by the conv; q, k, v 32 KiB read and o 16 KiB
//                   written by the delta rule; o and z 32 KiB read, out 8 KiB written
//                   by the norm; the conv weights 128 KiB once per batch
// so ~4.3 MiB, 92% of it the state matrices. The arithmetic is 7 flops a state element
// (decay, S^T k, the rank-1 update, S^T q): 3.7 MFLOP against 4.3 MiB, under 1 flop a
// byte, far below any GPU's balance point: the floor is the bytes (~21 us a
// sequence-layer at GB10's ~218 GB/s). Each state element is therefore read once and
// written once a step, kept in a register across the sequence's rows, and the matrices'
// fetch is issued before the kernel waits for the conv (delta_rule_kernel).
//
// A prefill chunk is the other way round. N rows of one sequence move the state once
// (4 MiB at that shape) but 48 KiB of q, k, v and o a row (96 MiB at N = 2048), and the
// recurrence would run them as N dependent steps of 4 barriers each. Sequences with at
// least kChunkMinRows rows take the chunked form (delta_chunk_kernel): C = 64 rows a step,
// 5 barriers a chunk. Its f32 arithmetic a row and value head, at dk = dv = 128:
//   scores q.k and k.k, each block of the head's dv / 32   (C + 1) dk dv / 32 = 33 K FMA
//   S_0^T q and S_0^T k                                      2 dk dv          = 33 K FMA
//   the triangular solve and the scores times u             ~C dv            =  8 K FMA
//   the state's update                                       dk dv            = 16 K FMA
// ~91 K FMA, 5.8 MFLOP a row for 32 heads, 1.6x the recurrence's 3.7 MFLOP, ~120 flops a
// byte: arithmetic-bound, where tensor cores for the C x C and C x dk products are the
// next step.
#include <algorithm>
#include <atomic>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/delta_net.h"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/recurrent_mixer.cuh"

namespace spark::cuda {
namespace {

using namespace recurrent;  // the pieces the recurrent mixers share

constexpr int kMaxHeadDim = kDeltaNetMaxHeadDim;
constexpr int kNormWarps = 4;
constexpr int kNormValuesPerLane = kMaxHeadDim / 32;
constexpr int kChunkWarps = 8;
constexpr int kMaxChunk = 64;
constexpr int kChunkRowsPerWarp = kMaxChunk / kChunkWarps;  // output rows a thread holds
// A sequence with at least this many rows in a call takes the chunked form; decode and
// short verification steps keep the recurrence. A guess without GPU timings: at 16 rows
// the chunk's 5 barriers replace the recurrence's 64.
constexpr int32_t kChunkMinRows = 16;
std::atomic<int32_t> g_chunk_min_rows{kChunkMinRows};

// The chunk length C for key dim dk: 64, or 32 above dk 128 to stay within sm_121's
// shared memory.
int32_t chunk_rows(int32_t dk) { return dk > 128 ? 32 : 64; }
// delta_chunk_kernel's dynamic shared memory: G (doubles), then k_s, s_s, m_s, u_s,
// beta_s, qinv_s, rest_s.
size_t chunk_smem_bytes(int32_t C, int32_t dk) {
  return sizeof(double) * size_t(C) + sizeof(float) * (size_t(C) * size_t(dk + 1) + size_t(dk) * 32 +
                                                       size_t(C) * size_t(C + 1) + size_t(C) * 32 + 3 * size_t(C));
}

// Sum of a float2 over the block (blockDim.x a multiple of 32); every thread gets it.
// The first barrier keeps a previous call's readers of `scratch` safe.
__device__ __forceinline__ float2 block_sum2(float2 v, float2* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v.x = warp_sum(v.x);
  v.y = warp_sum(v.y);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : make_float2(0.0f, 0.0f);
  return make_float2(warp_sum(v.x), warp_sum(v.y));
}

struct RuleArgs {
  float* qkv;  // conv output in; o written over the v columns
  const float* b;
  const float* a;
  const float* neg_exp_a;
  const float* dt_bias;
  RecurrentStates st;
  const int32_t* query_start;
  const int32_t* positions;
  int64_t conv_state_values;  // floats before the matrices in a layer's state
  int32_t num_k_heads, num_v_heads, dk, dv;
  int32_t num_seqs;
  int32_t chunk_min_rows;  // sequences with at least this many rows take delta_chunk_kernel
  int32_t chunk;           // delta_chunk_kernel's chunk length C
  bool tiled;
};

// The gated delta rule, per value head and row of the sequence:
//   S *= decay;  S += k (beta (v - S^T k))^T;  o = S^T q
// with q, k L2-normalised here (q also scaled by 1/sqrt(dk)). Columns of S are
// independent given q, k, v, so a block takes 32 columns (lane = column) of one value
// head of one sequence, and its dk / R warps split the key rows: thread (warp w, lane l)
// keeps S[w R .. w R + R - 1][c0 + l] in registers for all the rows, reads them once and
// writes them once (a warp reads 32 adjacent floats of a row: coalesced). S^T k and S^T q
// are per-warp partial sums added over the warps in shared memory. o goes over v in qkv:
// each v value is read by the block that writes its o, before it writes it.
// The conv kernel ahead writes qkv and the conv state only, so the matrices (and the
// slots, query_start, positions) are loaded before grid_dependency_wait: under a
// programmatic launch the state's fetch overlaps the conv.
// R is 16 (dk a multiple of 16) or 8, so a block has dk / R <= 16 or <= 31 warps. The bounds
// say so with one block an SM at least: then ptxas (sm_90 and sm_121) keeps the R state
// values, the row's normalised k and q, and the rest in registers without spilling; R = 32
// would need ~200 registers on sm_121.
template <int R>
__global__ void __launch_bounds__(32 * kMaxHeadDim / R, 1) delta_rule_kernel(RuleArgs p) {
  __shared__ float q_s[kMaxHeadDim], k_s[kMaxHeadDim], v_s[32];
  __shared__ float kv_part[32][32], o_part[32][32];
  __shared__ float2 scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int seq = blockIdx.z, h = blockIdx.y, c = blockIdx.x * 32 + lane;
  const bool has_col = c < p.dv;
  const int row0 = warp * R;

  const int32_t r0 = __ldg(p.query_start + seq), r1 = __ldg(p.query_start + seq + 1);
  // Long sequences are delta_chunk_kernel's: their states are not read here.
  float* const state = r1 - r0 < p.chunk_min_rows ? layer_state(p.st, seq, p.query_start) : nullptr;
  float* const matrix = state ? state + p.conv_state_values + int64_t(h) * p.dk * p.dv : nullptr;
  const bool load = state && __ldg(p.positions + r0) != 0 && has_col;  // position 0: a zero state
  float m[R];
#pragma unroll
  for (int j = 0; j < R; ++j) m[j] = load ? load_once(matrix + int64_t(row0 + j) * p.dv + c) : 0.0f;
  wait_then_allow_next_kernel();
  if (!state) return;  // uniform over the block

  const int kh = p.tiled ? h % p.num_k_heads : h / (p.num_v_heads / p.num_k_heads);
  const int64_t key_dim = int64_t(p.num_k_heads) * p.dk, channels = 2 * key_dim + int64_t(p.num_v_heads) * p.dv;
  const int64_t q_col = int64_t(kh) * p.dk, k_col = key_dim + q_col, v_col = 2 * key_dim + int64_t(h) * p.dv + c;
  const float q_scale = 1.0f / sqrtf(float(p.dk));
  const float neg_exp_a = __ldg(p.neg_exp_a + h), dt_bias = __ldg(p.dt_bias + h);
  for (int64_t r = r0; r < r1; ++r) {
    float* row = p.qkv + r * channels;
    float2 sq = make_float2(0.0f, 0.0f);
    if (int(threadIdx.x) < p.dk) {  // blockDim = 32 dk / R >= dk
      const float q = __ldg(row + q_col + threadIdx.x), k = __ldg(row + k_col + threadIdx.x);
      q_s[threadIdx.x] = q;
      k_s[threadIdx.x] = k;
      sq = make_float2(q * q, k * k);
    }
    if (warp == 0 && has_col) v_s[lane] = load_once(row + v_col);
    const float decay = expf(neg_exp_a * softplus(__ldg(p.a + r * p.num_v_heads + h) + dt_bias));
    const float beta = sigmoid(__ldg(p.b + r * p.num_v_heads + h));
    sq = block_sum2(sq, scratch);  // its barriers also publish q_s, k_s, v_s
    const float q_inv = 1.0f / sqrtf(sq.x + 1e-6f), k_inv = 1.0f / sqrtf(sq.y + 1e-6f);

    float part = 0.0f;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      m[j] *= decay;
      part += m[j] * (k_s[row0 + j] * k_inv);
    }
    kv_part[warp][lane] = part;
    __syncthreads();
    float kv = 0.0f;
    for (int w = 0; w < warps; ++w) kv += kv_part[w][lane];
    const float delta = has_col ? (v_s[lane] - kv) * beta : 0.0f;

    part = 0.0f;
#pragma unroll
    for (int j = 0; j < R; ++j) {
      m[j] += (k_s[row0 + j] * k_inv) * delta;
      part += m[j] * (q_s[row0 + j] * q_inv * q_scale);
    }
    o_part[warp][lane] = part;
    __syncthreads();  // also: every read of this row's q_s, k_s, v_s is done
    if (warp == 0 && has_col) {
      float o = 0.0f;
      for (int w = 0; w < warps; ++w) o += o_part[w][lane];
      row[v_col] = o;
    }
  }
  if (has_col) {
#pragma unroll
    for (int j = 0; j < R; ++j) __stcs(matrix + int64_t(row0 + j) * p.dv + c, m[j]);
  }
}

// The chunked form of the same rule, for sequences with many rows this step (prefill
// chunks). Within a chunk of n <= C rows, with g_t the per-row log-decay, G_t = g_1 + .. +
// g_t, S_0 the state before the chunk and u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t) the
// row's delta, unrolling the recurrence gives
//   S_t = exp(G_t) S_0 + sum_{j<=t} exp(G_t - G_j) k_j u_j^T
// so u is the solution of the unit lower-triangular system (the UT transform)
//   u_i + beta_i sum_{j<i} exp(G_i - G_j) (k_i . k_j) u_j = beta_i (v_i - exp(G_i) S_0^T k_i)
// and then
//   o_i = exp(G_i) S_0^T q_i + sum_{j<=i} exp(G_i - G_j) (q_i . k_j) u_j
//   S_n = exp(G_n) S_0 + sum_j exp(G_n - G_j) k_j u_j^T.
// Only exponents with i >= j occur: each is <= 0, so nothing overflows. G is summed in
// double: with strong decays |G| reaches thousands within a chunk, where a float's G_i -
// G_j would lose the few digits that matter (the numpy prototype: 3e-5 relative output
// error in float, 1.5e-7 in double, as good as the recurrence itself).
// A block takes one value head's 32 columns of one sequence, as delta_rule_kernel does,
// and walks its chunks in order with the state's columns in shared memory; per chunk:
//   1. a warp per row: k normalised into k_s, q's norm, g and beta;
//   2. G's prefix sum;
//   3. every pair j <= i: the scores exp(G_i - G_j) (q_i . k_j) / |q_i| / sqrt(dk) above
//      the diagonal of m_s (at [j][i], diagonal included) and beta_i exp(G_i - G_j)
//      (k_i . k_j) below it (at [i][j]); per row, the right-hand side into u_s and
//      exp(G_i) S_0^T q_i in registers;
//   4. warp 0 solves for u by forward substitution, a lane per column (the columns are
//      independent, so no barrier inside);
//   5. the outputs over v in qkv, and the state's update in place (a thread its own
//      rows of s_s, so no barrier between reading and writing them).
// The C x C products over dk are recomputed by each of a head's dv / 32 blocks; with
// f32 FMAs this is a first version (tensor cores are the next step). Shared memory:
// chunk_smem_bytes, under 76 KiB for every accepted dk (C = 32 for dk > 128), within the
// opt-in limit of sm_90 (227 KiB) and sm_121 (99 KiB). The bounds ask for two blocks an
// SM, up to 128 registers a thread: with the block size alone ptxas for sm_121 chose 80
// registers and spilled.
__global__ void __launch_bounds__(32 * kChunkWarps, 2) delta_chunk_kernel(RuleArgs p) {
  extern __shared__ double chunk_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = blockIdx.y, c = blockIdx.x * 32 + lane;
  const bool has_col = c < p.dv;
  // Block z takes the batch's z-th sequence of at least chunk_min_rows rows (-1: none).
  // The grid has only num_tokens / chunk_min_rows of them, so that a decode batch of many
  // sequences launches few blocks here.
  int seq = -1;
  for (int s = 0, found = 0; s < p.num_seqs; ++s)
    if (__ldg(p.query_start + s + 1) - __ldg(p.query_start + s) >= p.chunk_min_rows && found++ == int(blockIdx.z)) {
      seq = s;
      break;
    }
  const int C = p.chunk, dk = p.dk, ks = dk + 1, ms = C + 1;  // odd row strides: no bank conflicts across rows
  double* const G_s = chunk_smem;                             // [C]
  float* const k_s = reinterpret_cast<float*>(G_s + C);       // [C][dk + 1]
  float* const s_s = k_s + C * ks;                            // [dk][32]
  float* const m_s = s_s + dk * 32;                           // [C][C + 1]
  float* const u_s = m_s + C * ms;                            // [C][32]
  float* const beta_s = u_s + C * 32;                         // [C]
  float* const qinv_s = beta_s + C;                           // [C]: 1 / |q| / sqrt(dk)
  float* const rest_s = qinv_s + C;                           // [C]: exp(G_n - G_j)

  const int32_t r0 = seq < 0 ? 0 : __ldg(p.query_start + seq), r1 = seq < 0 ? 0 : __ldg(p.query_start + seq + 1);
  float* const state = seq < 0 ? nullptr : layer_state(p.st, seq, p.query_start);
  float* const matrix = state ? state + p.conv_state_values + int64_t(h) * dk * p.dv : nullptr;
  const bool load = state && __ldg(p.positions + r0) != 0 && has_col;  // position 0: a zero state
  for (int d = warp; d < dk; d += kChunkWarps)
    s_s[d * 32 + lane] = load ? load_once(matrix + int64_t(d) * p.dv + c) : 0.0f;
  wait_then_allow_next_kernel();
  if (!state) return;  // uniform over the block

  const int kh = p.tiled ? h % p.num_k_heads : h / (p.num_v_heads / p.num_k_heads);
  const int64_t key_dim = int64_t(p.num_k_heads) * dk, channels = 2 * key_dim + int64_t(p.num_v_heads) * p.dv;
  const int64_t q_col = int64_t(kh) * dk, k_col = key_dim + q_col, v_col = 2 * key_dim + int64_t(h) * p.dv + c;
  const float q_scale = 1.0f / sqrtf(float(dk));
  const float neg_exp_a = __ldg(p.neg_exp_a + h), dt_bias = __ldg(p.dt_bias + h);
  for (int64_t base = r0; base < r1; base += C) {
    const int n = int(r1 - base < C ? r1 - base : C);
    for (int t = warp; t < n; t += kChunkWarps) {
      const float* row = p.qkv + (base + t) * channels;
      float qq = 0.0f, kk = 0.0f;
      for (int d = lane; d < dk; d += 32) {
        const float q = __ldg(row + q_col + d), k = __ldg(row + k_col + d);
        qq += q * q;
        kk += k * k;
        k_s[t * ks + d] = k;
      }
      const float k_inv = 1.0f / sqrtf(warp_sum(kk) + 1e-6f);
      qq = warp_sum(qq);
      for (int d = lane; d < dk; d += 32) k_s[t * ks + d] *= k_inv;  // this lane's own values
      if (lane == 0) {
        const int64_t at = (base + t) * p.num_v_heads + h;
        qinv_s[t] = 1.0f / sqrtf(qq + 1e-6f) * q_scale;
        G_s[t] = double(neg_exp_a * softplus(__ldg(p.a + at) + dt_bias));
        beta_s[t] = sigmoid(__ldg(p.b + at));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int t = 1; t < n; ++t) G_s[t] += G_s[t - 1];
    __syncthreads();

    const double G_last = G_s[n - 1];
    for (int j = threadIdx.x; j < n; j += blockDim.x) rest_s[j] = expf(float(G_last - G_s[j]));
    const int pairs = n * (n + 1) / 2;  // (i, j), j <= i, numbered i (i + 1) / 2 + j
    for (int idx = threadIdx.x; idx < pairs; idx += blockDim.x) {
      int i = int((sqrtf(8.0f * float(idx) + 1.0f) - 1.0f) * 0.5f);
      while (i * (i + 1) / 2 > idx) --i;  // the float root may be one off
      while ((i + 1) * (i + 2) / 2 <= idx) ++i;
      const int j = idx - i * (i + 1) / 2;
      const float* q = p.qkv + (base + i) * channels + q_col;
      const float *ki = k_s + i * ks, *kj = k_s + j * ks;
      float qk = 0.0f, kk = 0.0f;
      for (int d = 0; d < dk; ++d) {
        qk += __ldg(q + d) * kj[d];
        kk += ki[d] * kj[d];
      }
      const float e = expf(float(G_s[i] - G_s[j]));
      m_s[j * ms + i] = qk * qinv_s[i] * e;
      if (j < i) m_s[i * ms + j] = beta_s[i] * kk * e;
    }
    float o[kChunkRowsPerWarp];  // rows warp + r kChunkWarps, column c
#pragma unroll
    for (int r = 0; r < kChunkRowsPerWarp; ++r) {
      const int i = warp + r * kChunkWarps;
      o[r] = 0.0f;
      if (i >= n) continue;
      const float* q = p.qkv + (base + i) * channels + q_col;
      const float* ki = k_s + i * ks;
      float qs = 0.0f, kS = 0.0f;
      for (int d = 0; d < dk; ++d) {
        const float sv = s_s[d * 32 + lane];
        qs += __ldg(q + d) * sv;
        kS += ki[d] * sv;
      }
      const float decay = expf(float(G_s[i]));
      o[r] = decay * qinv_s[i] * qs;
      const float v = has_col ? load_once(p.qkv + (base + i) * channels + v_col) : 0.0f;
      u_s[i * 32 + lane] = beta_s[i] * (v - decay * kS);
    }
    __syncthreads();

    if (warp == 0)
      for (int i = 1; i < n; ++i) {
        float acc = 0.0f;
        for (int j = 0; j < i; ++j) acc += m_s[i * ms + j] * u_s[j * 32 + lane];
        u_s[i * 32 + lane] -= acc;
      }
    __syncthreads();

#pragma unroll
    for (int r = 0; r < kChunkRowsPerWarp; ++r) {
      const int i = warp + r * kChunkWarps;
      if (i >= n) continue;
      float acc = o[r];
      for (int j = 0; j <= i; ++j) acc += m_s[j * ms + i] * u_s[j * 32 + lane];
      if (has_col) p.qkv[(base + i) * channels + v_col] = acc;
    }
    const float decay_all = expf(float(G_last));
    for (int d = warp; d < dk; d += kChunkWarps) {
      float acc = decay_all * s_s[d * 32 + lane];
      for (int j = 0; j < n; ++j) acc += rest_s[j] * k_s[j * ks + d] * u_s[j * 32 + lane];
      s_s[d * 32 + lane] = acc;
    }
    __syncthreads();  // the next chunk overwrites k_s, G_s, m_s, u_s
  }
  if (has_col)
    for (int d = warp; d < dk; d += kChunkWarps) __stcs(matrix + int64_t(d) * p.dv + c, s_s[d * 32 + lane]);
}

// The gated RMSNorm, a warp per (row, value head): out = norm(o) * weight * silu(z) in
// cpu::delta_net's order, rounded to T. Rows of padding sequences, and rows past the
// batch's last sequence, get zeros: their o was never computed. A row finds its sequence
// by binary search over query_start.
template <typename T>
__global__ void __launch_bounds__(32 * kNormWarps)
    gated_norm_kernel(const float* __restrict__ qkv, const float* __restrict__ z, const float* __restrict__ weight,
                      const int32_t* __restrict__ slots, const int32_t* __restrict__ query_start, int32_t num_seqs,
                      int32_t num_tokens, int32_t num_v_heads, int32_t dv, int64_t channels, int64_t o_offset,
                      float eps, T* __restrict__ out) {
  wait_then_allow_next_kernel();
  const int lane = threadIdx.x & 31;
  const int64_t item = int64_t(blockIdx.x) * kNormWarps + (threadIdx.x >> 5);
  if (item >= int64_t(num_tokens) * num_v_heads) return;  // uniform over the warp
  const int64_t t = item / num_v_heads, h = item % num_v_heads, value_dim = int64_t(num_v_heads) * dv;
  const bool active = row_is_live(t, slots, query_start, num_seqs);
  T* dst = out + t * value_dim + h * dv;
  if (!active) {
    for (int c = lane; c < dv; c += 32) dst[c] = from_f32<T>(0.0f);
    return;
  }
  const float* o_row = qkv + t * channels + o_offset + h * dv;
  float o[kNormValuesPerLane];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormValuesPerLane; ++i) {
    const int c = lane + 32 * i;
    o[i] = c < dv ? load_once(o_row + c) : 0.0f;
    sum_sq += o[i] * o[i];
  }
  const float inv = 1.0f / sqrtf(warp_sum(sum_sq) / float(dv) + eps);
  const float* z_row = z + t * value_dim + h * dv;
#pragma unroll
  for (int i = 0; i < kNormValuesPerLane; ++i) {
    const int c = lane + 32 * i;
    if (c >= dv) break;
    const float g = __ldg(z_row + c);
    dst[c] = from_f32<T>(o[i] * inv * __ldg(weight + c) * (g * sigmoid(g)));
  }
}

bool head_dim_ok(int32_t d) { return d >= 8 && d <= kMaxHeadDim && d % 8 == 0; }

}  // namespace

template <typename T>
void delta_net_mix(const DeltaNetShape& d, const DeltaNetLayerWeights& w, const RecurrentStates& states,
                   const int32_t* query_start, const int32_t* positions, int32_t num_seqs, int32_t num_tokens,
                   float* qkv, const float* z, const float* b, const float* a, T* out, cudaStream_t stream,
                   bool programmatic) {
  SPARK_CHECK(num_seqs >= 0 && num_tokens >= 0, "delta_net_mix: negative num_seqs or num_tokens");
  SPARK_CHECK(num_seqs <= 65535, "delta_net_mix: at most 65535 sequences a call");
  SPARK_CHECK(d.num_k_heads > 0 && d.num_v_heads > 0 && d.num_v_heads % d.num_k_heads == 0,
              "delta_net_mix: num_v_heads must be a positive multiple of num_k_heads");
  SPARK_CHECK(head_dim_ok(d.k_head_dim) && head_dim_ok(d.v_head_dim),
              "delta_net_mix: k_head_dim and v_head_dim must be multiples of 8 in [8, 256]");
  SPARK_CHECK(d.conv_kernel >= 1 && d.conv_kernel <= kDeltaNetMaxConvKernel, "delta_net_mix: conv_kernel must be in [1, 8]");
  SPARK_CHECK(d.num_v_heads <= 65535, "delta_net_mix: at most 65535 value heads");
  if (num_tokens == 0) return;
  SPARK_CHECK(qkv && z && b && a && out && query_start && positions, "delta_net_mix: a null activation pointer");
  SPARK_CHECK(w.conv && w.neg_exp_a && w.dt_bias && w.norm, "delta_net_mix: a null weight pointer");
  SPARK_CHECK(num_seqs == 0 || (states.base && states.slots), "delta_net_mix: null states or slots");
  SPARK_CHECK(states.layer_offset >= 0 && states.slot_stride >= states.layer_offset + d.state_values(),
              "delta_net_mix: the layer's state must lie inside its slot (slot_stride >= layer_offset + state_values)");

  const int32_t channels = int32_t(d.conv_dim());
  if (num_seqs > 0) {
    recurrent::conv_silu(qkv, channels, 0, channels, w.conv, nullptr, d.conv_kernel, states, query_start, positions,
                         num_seqs, stream, programmatic);

    RuleArgs args;
    args.qkv = qkv;
    args.b = b;
    args.a = a;
    args.neg_exp_a = w.neg_exp_a;
    args.dt_bias = w.dt_bias;
    args.st = states;
    args.query_start = query_start;
    args.positions = positions;
    args.conv_state_values = d.conv_dim() * (d.conv_kernel - 1);
    args.num_k_heads = d.num_k_heads;
    args.num_v_heads = d.num_v_heads;
    args.dk = d.k_head_dim;
    args.dv = d.v_head_dim;
    args.tiled = d.value_heads_tiled;
    args.num_seqs = num_seqs;
    args.chunk_min_rows = g_chunk_min_rows.load();
    args.chunk = chunk_rows(d.k_head_dim);
    // R key rows a thread: 16 where it divides dk, else 8 (dk / R warps <= 31).
    const int rows = d.k_head_dim % 16 == 0 ? 16 : 8;
    const dim3 grid(unsigned(ceil_div(d.v_head_dim, 32)), unsigned(d.num_v_heads), unsigned(num_seqs));
    const dim3 block(unsigned(32 * (d.k_head_dim / rows)));
    if (rows == 16)
      launch_kernel("delta_rule_kernel", programmatic, delta_rule_kernel<16>, grid, block, 0, stream, args);
    else
      launch_kernel("delta_rule_kernel", programmatic, delta_rule_kernel<8>, grid, block, 0, stream, args);
    // At most num_tokens / chunk_min_rows sequences can be long: a block row (z) for each,
    // none at all for a batch of fewer rows.
    const int32_t long_seqs = std::min(num_seqs, num_tokens / args.chunk_min_rows);
    if (long_seqs > 0) {
      const size_t smem = chunk_smem_bytes(args.chunk, d.k_head_dim);
      CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      launch_kernel("delta_chunk_kernel", programmatic, delta_chunk_kernel, dim3(grid.x, grid.y, unsigned(long_seqs)),
                    dim3(32 * kChunkWarps), smem, stream, args);
    }
  }

  const int64_t items = int64_t(num_tokens) * d.num_v_heads;
  launch_kernel("gated_norm_kernel", programmatic, gated_norm_kernel<T>, dim3(unsigned(ceil_div(items, kNormWarps))),
                dim3(32 * kNormWarps), 0, stream, qkv, z, w.norm, states.slots, query_start, num_seqs, num_tokens,
                d.num_v_heads, d.v_head_dim, d.conv_dim(), 2 * d.key_dim(), d.eps, out);
}

int32_t delta_net_set_chunk_min_rows(int32_t rows) { return g_chunk_min_rows.exchange(rows < 1 ? 1 : rows); }

template void delta_net_mix<bf16>(const DeltaNetShape&, const DeltaNetLayerWeights&, const RecurrentStates&,
                                  const int32_t*, const int32_t*, int32_t, int32_t, float*, const float*, const float*,
                                  const float*, bf16*, cudaStream_t, bool);
template void delta_net_mix<f16>(const DeltaNetShape&, const DeltaNetLayerWeights&, const RecurrentStates&,
                                 const int32_t*, const int32_t*, int32_t, int32_t, float*, const float*, const float*,
                                 const float*, f16*, cudaStream_t, bool);

}  // namespace spark::cuda
