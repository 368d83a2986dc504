// delta_net.cu — the Gated DeltaNet token mixer (delta_net.h) in three kernels: the causal
// conv1d + SiLU, the gated delta rule (with the L2 norm of q and k), the gated RMSNorm.
//
// Prefill runs the same exact one-token recurrence as decode, row after row (a chunked
// form, which turns most of the work into matrix products, comes later). Decode is the
// case to be fast, and it is bound by the recurrent state: at Qwen3.6-35B-A3B's shape
// (16/32 heads of 128 x 128, conv_kernel 4, conv_dim 8192) one sequence's step of one
// layer moves
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
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/delta_net.h"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {
namespace {

constexpr int kMaxHeadDim = 256;
constexpr int kMaxConvKernel = 8;
constexpr int kConvThreads = 128;
constexpr int kNormWarps = 4;
constexpr int kNormValuesPerLane = kMaxHeadDim / 32;

// A load of memory this launch reads once and may overwrite afterwards (the state, qkv in
// place): coherent (ld.global.nc would be wrong for memory the launch writes), with the
// evict-first hint. The emulator counts it as read-once traffic, as it counts
// ld.global.nc, so the byte check sees every state read.
template <typename V>
__device__ __forceinline__ V load_once(const V* p) {
#if SPARK_CUDA_EMU
  if (::emu::g_counting_reads) ::emu::count_global_read(p, sizeof(V), true);
#endif
  return __ldcs(p);
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
// torch's softplus (threshold 20: linear above it), as cpu::delta_net has it.
__device__ __forceinline__ float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

// The state of sequence `seq` of this layer, or null for a padding sequence (slot -1) or
// one without rows this step: those read and write no state.
__device__ __forceinline__ float* layer_state(const DeltaNetStates& st, int seq, const int32_t* query_start) {
  const int32_t slot = __ldg(st.slots + seq);
  if (slot < 0 || __ldg(query_start + seq + 1) <= __ldg(query_start + seq)) return nullptr;
  return st.base + int64_t(slot) * st.slot_stride + st.layer_offset;
}

// The causal depthwise conv1d + SiLU, in place over qkv: a thread per (sequence, channel)
// walks the sequence's rows in order with the last K - 1 inputs in registers (loaded from
// the conv state, or zeros at position 0) and leaves them in the state. Tap k multiplies
// the input K - 1 - k rows back, summed in cpu::delta_net's order.
__global__ void __launch_bounds__(kConvThreads)
    conv_silu_kernel(float* __restrict__ qkv, const float* __restrict__ conv_w, DeltaNetStates st,
                     const int32_t* __restrict__ query_start, const int32_t* __restrict__ positions, int32_t channels,
                     int32_t taps) {
  wait_then_allow_next_kernel();
  const int seq = blockIdx.y;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  float* state = layer_state(st, seq, query_start);
  if (!state) return;
  const int32_t r0 = __ldg(query_start + seq), r1 = __ldg(query_start + seq + 1);
  const bool fresh = __ldg(positions + r0) == 0;
  float* hist = state + c * (taps - 1);

  // Register arrays indexed by unrolled constants only; `taps` decides which are live.
  float win[kMaxConvKernel - 1], tap[kMaxConvKernel - 1];
#pragma unroll
  for (int k = 0; k < kMaxConvKernel - 1; ++k) {
    win[k] = k < taps - 1 && !fresh ? load_once(hist + k) : 0.0f;
    tap[k] = k < taps - 1 ? __ldg(conv_w + c * taps + k) : 0.0f;
  }
  const float tap_new = __ldg(conv_w + c * taps + taps - 1);
  for (int64_t r = r0; r < r1; ++r) {
    float* x = qkv + r * channels + c;
    const float in = load_once(x);
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxConvKernel - 1; ++k)
      if (k < taps - 1) acc += tap[k] * win[k];
    acc += tap_new * in;
    *x = acc * sigmoid(acc);
#pragma unroll
    for (int k = 0; k < kMaxConvKernel - 1; ++k) {
      if (k < taps - 2)
        win[k] = win[k + 1];
      else if (k == taps - 2)
        win[k] = in;
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxConvKernel - 1; ++k)
    if (k < taps - 1) hist[k] = win[k];
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
  DeltaNetStates st;
  const int32_t* query_start;
  const int32_t* positions;
  int64_t conv_state_values;  // floats before the matrices in a layer's state
  int32_t num_k_heads, num_v_heads, dk, dv;
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

  float* const state = layer_state(p.st, seq, p.query_start);
  const int32_t r0 = __ldg(p.query_start + seq), r1 = __ldg(p.query_start + seq + 1);
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
  bool active = false;
  if (num_seqs > 0 && t >= __ldg(query_start) && t < __ldg(query_start + num_seqs)) {
    int lo = 0, hi = num_seqs;  // query_start[lo] <= t < query_start[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (__ldg(query_start + mid) <= t)
        lo = mid;
      else
        hi = mid;
    }
    active = __ldg(slots + lo) >= 0;
  }
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
void delta_net_mix(const DeltaNetShape& d, const DeltaNetLayerWeights& w, const DeltaNetStates& states,
                   const int32_t* query_start, const int32_t* positions, int32_t num_seqs, int32_t num_tokens,
                   float* qkv, const float* z, const float* b, const float* a, T* out, cudaStream_t stream,
                   bool programmatic) {
  SPARK_CHECK(num_seqs >= 0 && num_tokens >= 0, "delta_net_mix: negative num_seqs or num_tokens");
  SPARK_CHECK(num_seqs <= 65535, "delta_net_mix: at most 65535 sequences a call");
  SPARK_CHECK(d.num_k_heads > 0 && d.num_v_heads > 0 && d.num_v_heads % d.num_k_heads == 0,
              "delta_net_mix: num_v_heads must be a positive multiple of num_k_heads");
  SPARK_CHECK(head_dim_ok(d.k_head_dim) && head_dim_ok(d.v_head_dim),
              "delta_net_mix: k_head_dim and v_head_dim must be multiples of 8 in [8, 256]");
  SPARK_CHECK(d.conv_kernel >= 1 && d.conv_kernel <= kMaxConvKernel, "delta_net_mix: conv_kernel must be in [1, 8]");
  SPARK_CHECK(d.num_v_heads <= 65535, "delta_net_mix: at most 65535 value heads");
  if (num_tokens == 0) return;
  SPARK_CHECK(qkv && z && b && a && out && query_start && positions, "delta_net_mix: a null activation pointer");
  SPARK_CHECK(w.conv && w.neg_exp_a && w.dt_bias && w.norm, "delta_net_mix: a null weight pointer");
  SPARK_CHECK(num_seqs == 0 || (states.base && states.slots), "delta_net_mix: null states or slots");
  SPARK_CHECK(states.layer_offset >= 0 && states.slot_stride >= states.layer_offset + d.state_values(),
              "delta_net_mix: the layer's state must lie inside its slot (slot_stride >= layer_offset + state_values)");

  const int32_t channels = int32_t(d.conv_dim());
  if (num_seqs > 0) {
    launch_kernel("conv_silu_kernel", programmatic, conv_silu_kernel,
                  dim3(unsigned(ceil_div(channels, kConvThreads)), unsigned(num_seqs)), dim3(kConvThreads), 0, stream,
                  qkv, w.conv, states, query_start, positions, channels, d.conv_kernel);

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
    // R key rows a thread: 16 where it divides dk, else 8 (dk / R warps <= 31).
    const int rows = d.k_head_dim % 16 == 0 ? 16 : 8;
    const dim3 grid(unsigned(ceil_div(d.v_head_dim, 32)), unsigned(d.num_v_heads), unsigned(num_seqs));
    const dim3 block(unsigned(32 * (d.k_head_dim / rows)));
    if (rows == 16)
      launch_kernel("delta_rule_kernel", programmatic, delta_rule_kernel<16>, grid, block, 0, stream, args);
    else
      launch_kernel("delta_rule_kernel", programmatic, delta_rule_kernel<8>, grid, block, 0, stream, args);
  }

  const int64_t items = int64_t(num_tokens) * d.num_v_heads;
  launch_kernel("gated_norm_kernel", programmatic, gated_norm_kernel<T>, dim3(unsigned(ceil_div(items, kNormWarps))),
                dim3(32 * kNormWarps), 0, stream, qkv, z, w.norm, states.slots, query_start, num_seqs, num_tokens,
                d.num_v_heads, d.v_head_dim, d.conv_dim(), 2 * d.key_dim(), d.eps, out);
}

template void delta_net_mix<bf16>(const DeltaNetShape&, const DeltaNetLayerWeights&, const DeltaNetStates&,
                                  const int32_t*, const int32_t*, int32_t, int32_t, float*, const float*, const float*,
                                  const float*, bf16*, cudaStream_t, bool);
template void delta_net_mix<f16>(const DeltaNetShape&, const DeltaNetLayerWeights&, const DeltaNetStates&,
                                 const int32_t*, const int32_t*, int32_t, int32_t, float*, const float*, const float*,
                                 const float*, f16*, cudaStream_t, bool);

}  // namespace spark::cuda
