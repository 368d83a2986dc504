// mamba2.h — launcher for the Mamba-2 token mixer of Nemotron-H on CUDA: the part between
// in_proj and out_proj. The math is cpu::mamba2's (engine/backend/cpu/mamba2.h), the
// reference it is checked against (tests/gpu/check_mamba2.cu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/recurrent_mixer.cuh"

namespace spark::cuda {

// ModelSpec::Mamba2's numbers, plus the grouped gated RMSNorm's eps. Accepted: head_dim in
// [1, 1024], state_size in [1, 256], num_heads a multiple of n_groups, conv_kernel in
// [1, 8], a norm group (inner / n_groups channels) of at most 4096.
inline constexpr int32_t kMamba2MaxStateSize = 256;
inline constexpr int32_t kMamba2MaxHeadDim = 1024;
inline constexpr int32_t kMamba2MaxConvKernel = kRecurrentMaxConvKernel;
inline constexpr int32_t kMamba2MaxGroupSize = 4096;

struct Mamba2Shape {
  int32_t num_heads = 0, head_dim = 0, n_groups = 0, state_size = 0, conv_kernel = 0;
  // dt = max(softplus(dt + dt_bias), dt_min), then min(dt, dt_max) when dt_max > 0.
  float dt_min = 0.0f, dt_max = 0.0f;
  float eps = 1e-5f;  // the grouped gated RMSNorm's
  int64_t inner() const { return int64_t(num_heads) * head_dim; }
  int64_t conv_dim() const { return inner() + 2 * int64_t(n_groups) * state_size; }
  int64_t in_proj_rows() const { return inner() + conv_dim() + num_heads; }
  // One layer's state of one sequence in floats, as ModelSpec::Mamba2::state_values: the
  // conv state, conv_dim x (conv_kernel - 1) (channel-major, oldest input first), then
  // num_heads matrices of head_dim x state_size (row p = head channel, column n = state).
  int64_t state_values() const { return conv_dim() * (conv_kernel - 1) + int64_t(num_heads) * head_dim * state_size; }
};

// One layer's weights on the device, f32.
struct Mamba2LayerWeights {
  const float* conv = nullptr;       // [conv_dim, conv_kernel], newest tap last
  const float* conv_bias = nullptr;  // [conv_dim], or null: no bias
  const float* neg_exp_a = nullptr;  // [num_heads]: A = -exp(A_log)
  const float* d = nullptr;          // [num_heads]: the skip's scale
  const float* dt_bias = nullptr;    // [num_heads]
  const float* norm = nullptr;       // [inner]: the grouped gated norm's weight
};

// One layer over the batch. proj [num_tokens, inner + conv_dim + num_heads] f32 is in_proj's
// output (z, then x|B|C, then dt), used as scratch: afterwards its x|B|C columns hold the
// conv output, with the x columns overwritten by y = S C + D x (before the gate and norm).
// query_start [num_seqs + 1] and positions [num_tokens] device int32 (the batch's).
// out [num_tokens, inner] in T (__nv_bfloat16 or __half, out_proj's input) gets
// rms_norm(y * silu(z)) * norm_weight over each group of inner / n_groups channels.
// A sequence whose first row has position 0 starts from a zero state (the slot's old
// contents are ignored, then overwritten); every other sequence continues the state in
// its slot; each leaves its state there. A padding sequence (slot -1) reads and writes no
// state and gets zero output rows, as do rows past query_start[num_seqs].
// Graph-capturable: no host sync, no allocation, no host reads of device data.
// programmatic: programmatic dependent launches (launch_kernel in common.cuh; sm_90 and
// later only).
template <typename T>
void mamba2_mix(const Mamba2Shape& shape, const Mamba2LayerWeights& w, const RecurrentStates& states,
                const int32_t* query_start, const int32_t* positions, int32_t num_seqs, int32_t num_tokens, float* proj,
                T* out, cudaStream_t stream, bool programmatic = false);

// Sequences with at least `rows` rows in a call take the chunked SSD scan, shorter ones
// the token-by-token recurrence (default 16). For checks that force one path;
// process-wide, read at each mamba2_mix call. Returns the previous value.
int32_t mamba2_set_chunk_min_rows(int32_t rows);

}  // namespace spark::cuda
