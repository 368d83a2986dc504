// mamba2.cu — the Mamba-2 token mixer (mamba2.h) in three kernels: the causal conv1d with
// bias + SiLU over x|B|C, the selective state update token by token, the grouped gated
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
// A prefill runs the same recurrence: N rows of one sequence are N dependent steps of a
// warp reduction each per state row. The next step is the chunked SSD scan for long
// sequences (as delta_net's chunked form): within a chunk of C rows, with the cumulative
// log-decays L, y = (C B^T o exp(L_i - L_j)) (dt x) + exp(L) C S_0 as C x C and C x N
// products (tensor cores), and the state carried between chunks.
#include <algorithm>

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
  float dt_min, dt_max;
};

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
  float* const state = layer_state(p.st, seq, p.query_start);
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

  const int g = h / (p.num_heads / p.n_groups);
  const int64_t inner = int64_t(p.num_heads) * p.head_dim;
  const int64_t x_col = inner + int64_t(h) * p.head_dim + row0;  // this warp's rows' x (then y)
  const int64_t b_col = 2 * inner + int64_t(g) * N, c_col = b_col + int64_t(p.n_groups) * N;
  const int64_t dt_col = 2 * inner + 2 * int64_t(p.n_groups) * N + h;
  const float neg_exp_a = __ldg(p.neg_exp_a + h), d_skip = __ldg(p.d + h), dt_bias = __ldg(p.dt_bias + h);
  const bool has_x = lane < kSsmRowsPerWarp && row0 + lane < p.head_dim;
  for (int64_t r = r0; r < r1; ++r) {
    float* row = p.proj + r * p.row_stride;
    float dt = softplus(__ldg(row + dt_col) + dt_bias);
    dt = fmaxf(dt, p.dt_min);
    if (p.dt_max > 0.0f) dt = fminf(dt, p.dt_max);
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
    recurrent::conv_silu(proj, row_stride, m.inner(), int32_t(m.conv_dim()), w.conv, w.conv_bias, m.conv_kernel,
                         states, query_start, positions, num_seqs, stream, programmatic);

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
  }

  const int64_t blocks = int64_t(num_tokens) * m.n_groups;
  SPARK_CHECK(blocks <= INT32_MAX, "mamba2_mix: too many (row, group) pairs");
  launch_kernel("gated_norm_kernel", programmatic, gated_norm_kernel<T>, dim3(unsigned(blocks)), dim3(kNormThreads), 0,
                stream, proj, w.norm, states.slots, query_start, num_seqs, num_tokens, m.n_groups,
                int32_t(m.inner() / m.n_groups), row_stride, m.eps, out);
}

template void mamba2_mix<bf16>(const Mamba2Shape&, const Mamba2LayerWeights&, const RecurrentStates&, const int32_t*,
                               const int32_t*, int32_t, int32_t, float*, bf16*, cudaStream_t, bool);
template void mamba2_mix<f16>(const Mamba2Shape&, const Mamba2LayerWeights&, const RecurrentStates&, const int32_t*,
                              const int32_t*, int32_t, int32_t, float*, f16*, cudaStream_t, bool);

}  // namespace spark::cuda
