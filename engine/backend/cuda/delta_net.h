// delta_net.h — launcher for the Gated DeltaNet token mixer of the hybrid models
// (Qwen3.5/3.6, Qwen3-Next) on CUDA: the part between the input projections and out_proj.
// The math is cpu::delta_net's (engine/backend/cpu/delta_net.h), the reference it is
// checked against (tests/gpu/check_delta_net.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/recurrent_mixer.cuh"

namespace spark::cuda {

// ModelSpec::DeltaNet's numbers, plus the gated RMSNorm's eps. Accepted: key and value
// head dims multiples of 8 in [8, 256], num_v_heads a multiple of num_k_heads,
// conv_kernel in [1, 8].
inline constexpr int32_t kDeltaNetMaxHeadDim = 256;  // key and value head dims
inline constexpr int32_t kDeltaNetMaxConvKernel = kRecurrentMaxConvKernel;

struct DeltaNetShape {
  int32_t num_k_heads = 0, num_v_heads = 0, k_head_dim = 0, v_head_dim = 0, conv_kernel = 0;
  bool value_heads_tiled = false;  // value head h reads key head h % num_k_heads (else h / (num_v / num_k))
  float eps = 1e-6f;               // the gated RMSNorm's
  int64_t key_dim() const { return int64_t(num_k_heads) * k_head_dim; }
  int64_t value_dim() const { return int64_t(num_v_heads) * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  // One layer's state of one sequence in floats: the conv state, conv_dim x (conv_kernel - 1)
  // (channel-major, oldest input first), then num_v_heads matrices of k_head_dim x v_head_dim
  // (row i = key dim, column c = value dim).
  int64_t state_values() const {
    return conv_dim() * (conv_kernel - 1) + int64_t(num_v_heads) * k_head_dim * v_head_dim;
  }
};

// One layer's weights on the device, f32.
struct DeltaNetLayerWeights {
  const float* conv = nullptr;       // [conv_dim, conv_kernel], newest tap last
  const float* neg_exp_a = nullptr;  // [num_v_heads]: -exp(A_log)
  const float* dt_bias = nullptr;    // [num_v_heads]
  const float* norm = nullptr;       // [v_head_dim]: the gated RMSNorm's weight
};

// One layer over the batch. qkv [num_tokens, conv_dim] f32 is the projection's output,
// used as scratch: afterwards its q and k columns hold the conv output and its v columns
// the delta rule's output before the norm. z [num_tokens, value_dim], b and a
// [num_tokens, num_v_heads] f32; query_start [num_seqs + 1] and positions [num_tokens]
// device int32 (the batch's). out [num_tokens, value_dim] in T (__nv_bfloat16 or __half,
// out_proj's input) gets norm(o) * norm_weight * silu(z) per value head.
// A sequence whose first row has position 0 starts from a zero state (the slot's old
// contents are ignored, then overwritten); every other sequence continues the state in
// its slot; each leaves its state there. A padding sequence (slot -1) reads and writes no
// state and gets zero output rows, as do rows past query_start[num_seqs].
// Graph-capturable: no host sync, no allocation, no host reads of device data.
// programmatic: programmatic dependent launches (launch_kernel in common.cuh; sm_90 and
// later only).
template <typename T>
void delta_net_mix(const DeltaNetShape& shape, const DeltaNetLayerWeights& w, const RecurrentStates& states,
                   const int32_t* query_start, const int32_t* positions, int32_t num_seqs, int32_t num_tokens,
                   float* qkv, const float* z, const float* b, const float* a, T* out, cudaStream_t stream,
                   bool programmatic = false);

// Sequences with at least `rows` rows in a call take the chunked form of the delta rule,
// shorter ones the token-by-token recurrence (default 16). For checks that force one
// path; process-wide, read at each delta_net_mix call. Returns the previous value.
int32_t delta_net_set_chunk_min_rows(int32_t rows);

}  // namespace spark::cuda
