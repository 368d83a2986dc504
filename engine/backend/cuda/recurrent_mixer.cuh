// recurrent_mixer.cuh — what the recurrent token mixers (Gated DeltaNet, delta_net.h;
// Mamba-2, mamba2.h) share: where their per-sequence states live, and the pieces of their
// kernels that are the same math: the causal conv1d + SiLU with its carried state, the
// state lookup by slot, and the element functions.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {

// The longest causal conv1d the mixers accept (their conv_kernel).
inline constexpr int32_t kRecurrentMaxConvKernel = 8;

// Where the states live: sequence s's state of this layer starts at
// base + slots[s] * slot_stride + layer_offset (the mixer's Shape::state_values() floats).
struct RecurrentStates {
  float* base = nullptr;           // every slot's state
  int64_t slot_stride = 0;         // floats from one slot to the next (all recurrent layers of the slot)
  int64_t layer_offset = 0;        // floats from a slot's start to this layer's state
  const int32_t* slots = nullptr;  // [num_seqs] device: each sequence's slot; -1 = a padding sequence
};

namespace recurrent {

constexpr int kConvThreads = 128;

// A load of memory this launch reads once and may overwrite afterwards (the state, the
// activations in place): coherent (ld.global.nc would be wrong for memory the launch
// writes), with the evict-first hint. The emulator counts it as read-once traffic, as it
// counts ld.global.nc, so the byte checks see every state read.
template <typename V>
__device__ __forceinline__ V load_once(const V* p) {
#if SPARK_CUDA_EMU
  if (::emu::g_counting_reads) ::emu::count_global_read(p, sizeof(V), true);
#endif
  return __ldcs(p);
}

__device__ __forceinline__ float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }
// torch's softplus (threshold 20: linear above it), as cpu::delta_net and cpu::mamba2 have it.
__device__ __forceinline__ float softplus(float v) { return v > 20.0f ? v : log1pf(expf(v)); }

// The state of sequence `seq` of this layer, or null for a padding sequence (slot -1) or
// one without rows this step: those read and write no state.
__device__ __forceinline__ float* layer_state(const RecurrentStates& st, int seq, const int32_t* query_start) {
  const int32_t slot = __ldg(st.slots + seq);
  if (slot < 0 || __ldg(query_start + seq + 1) <= __ldg(query_start + seq)) return nullptr;
  return st.base + int64_t(slot) * st.slot_stride + st.layer_offset;
}

// Whether output row t belongs to a sequence that is not padding (slot -1): false also for
// rows past query_start[num_seqs], whose sequence is none. A binary search over query_start.
__device__ __forceinline__ bool row_is_live(int64_t t, const int32_t* slots, const int32_t* query_start,
                                            int32_t num_seqs) {
  if (num_seqs <= 0 || t < __ldg(query_start) || t >= __ldg(query_start + num_seqs)) return false;
  int lo = 0, hi = num_seqs;  // query_start[lo] <= t < query_start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (__ldg(query_start + mid) <= t)
      lo = mid;
    else
      hi = mid;
  }
  return __ldg(slots + lo) >= 0;
}

// The causal depthwise conv1d (+ bias when kBias) + SiLU, in place over `channels`
// columns from col0 of a row-major activation buffer: a thread per (sequence, channel)
// walks the sequence's rows in order with the last K - 1 inputs in registers (loaded from
// the conv state, or zeros at position 0) and leaves them in the state. Tap k multiplies
// the input K - 1 - k rows back, summed after the bias in cpu::delta_net's and
// cpu::mamba2's order.
template <bool kBias>
__global__ void __launch_bounds__(kConvThreads)
    conv_silu_kernel(float* __restrict__ act, const float* __restrict__ conv_w, const float* __restrict__ conv_b,
                     RecurrentStates st, const int32_t* __restrict__ query_start,
                     const int32_t* __restrict__ positions, int64_t row_stride, int64_t col0, int32_t channels,
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
  float win[kRecurrentMaxConvKernel - 1], tap[kRecurrentMaxConvKernel - 1];
#pragma unroll
  for (int k = 0; k < kRecurrentMaxConvKernel - 1; ++k) {
    win[k] = k < taps - 1 && !fresh ? load_once(hist + k) : 0.0f;
    tap[k] = k < taps - 1 ? __ldg(conv_w + c * taps + k) : 0.0f;
  }
  const float tap_new = __ldg(conv_w + c * taps + taps - 1);
  const float bias = kBias ? __ldg(conv_b + c) : 0.0f;
  for (int64_t r = r0; r < r1; ++r) {
    float* x = act + r * row_stride + col0 + c;
    const float in = load_once(x);
    float acc = bias;
#pragma unroll
    for (int k = 0; k < kRecurrentMaxConvKernel - 1; ++k)
      if (k < taps - 1) acc += tap[k] * win[k];
    acc += tap_new * in;
    *x = acc * sigmoid(acc);
#pragma unroll
    for (int k = 0; k < kRecurrentMaxConvKernel - 1; ++k) {
      if (k < taps - 2)
        win[k] = win[k + 1];
      else if (k == taps - 2)
        win[k] = in;
    }
  }
#pragma unroll
  for (int k = 0; k < kRecurrentMaxConvKernel - 1; ++k)
    if (k < taps - 1) hist[k] = win[k];
}

// Launches conv_silu_kernel over num_seqs sequences (num_seqs > 0); conv_b null: no bias.
inline void conv_silu(float* act, int64_t row_stride, int64_t col0, int32_t channels, const float* conv_w,
                      const float* conv_b, int32_t taps, const RecurrentStates& st, const int32_t* query_start,
                      const int32_t* positions, int32_t num_seqs, cudaStream_t stream, bool programmatic) {
  const dim3 grid(unsigned(ceil_div(channels, kConvThreads)), unsigned(num_seqs));
  if (conv_b)
    launch_kernel("conv_silu_kernel", programmatic, conv_silu_kernel<true>, grid, dim3(kConvThreads), 0, stream, act,
                  conv_w, conv_b, st, query_start, positions, row_stride, col0, channels, taps);
  else
    launch_kernel("conv_silu_kernel", programmatic, conv_silu_kernel<false>, grid, dim3(kConvThreads), 0, stream,
                  act, conv_w, conv_b, st, query_start, positions, row_stride, col0, channels, taps);
}

}  // namespace recurrent
}  // namespace spark::cuda
