// moe_experts.h — the experts' MLPs (SwiGLU, or Nemotron-H's squared ReLU) over the grouped (token, expert) pairs
// (moe_router.h): a GEMV family for decode steps that reads each selected expert's
// weights once whatever the number of tokens that chose it, a grouped GEMM on tensor
// cores for prefill, and the weighted sum back to the tokens. All read expert ids and
// groups from device memory: no host synchronisation, capturable in a CUDA graph.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/kernel_args.h"
#include "engine/backend/cuda/moe_router.h"

namespace spark::cuda {

// The experts of one layer, stacked: expert e's rows of gate_up are [e * 2 * inter,
// (e + 1) * 2 * inter) (its gate rows, then its up rows; k = hidden), of down
// [e * hidden, (e + 1) * hidden) (k = inter). Any WeightFormat (weight_readers.cuh).
// Ungated experts (ExpertShape::gated false) have no gate rows: gate_up holds expert e's
// up rows at [e * inter, (e + 1) * inter).
// gpt-oss adds a bias to every projection (a row's bias at the row's index in its stack)
// and clamps its SwiGLU: gate' = min(gate, limit), up' = clamp(up, -limit, limit),
// act = gate' * sigmoid(alpha * gate') * (up' + 1). Null / 0: none, plain SwiGLU.
struct ExpertExtras {
  const float* gate_up_bias = nullptr;  // [experts * 2 * inter], f32
  const float* down_bias = nullptr;     // [experts * hidden], f32
  float swiglu_limit = 0;
  float swiglu_alpha = 1;
  bool gelu_tanh = false;  // Gemma 4: gelu_tanh(gate) * up instead of SwiGLU
};
struct ExpertWeights {
  DeviceMatrix gate_up;
  DeviceMatrix down;
  ExpertExtras extras;
};

// hidden: the width the experts read and write (LatentMoE's latent width, not the
// model's). gated false: act = relu(up)^2 (Nemotron-H), as cpu::relu2.
// Widths: hidden and inter positive multiples of 16 and of the format's values a chunk
// (weight_readers.cuh: 8 HALF, 16 Q8_0 and FP8, 32 the block formats and MXFP4); the
// files' blocks ask more of them anyway (Q8_0 32, K-quants 256).
struct ExpertShape {
  int32_t experts = 0, hidden = 0, inter = 0;
  bool gated = true;
};

// Grouped rows of the grouped GEMM's tiles (MoeGroups::tile_offsets).
inline constexpr int32_t kMoeTileRows = 64;

// act[r, :] = silu(gate_e · x[row_token[r]]) * (up_e · x[row_token[r]]) (or gpt-oss's
// variant with biases, ExpertExtras; or relu(up_e · x[row_token[r]])^2 ungated) for every grouped
// row r of every active expert e; x [tokens, hidden] and act [pairs, inter] in the
// compute type. max_pairs: the most pairs any step captured with this launch may have
// (sizes the grid; blocks past the step's experts or tiles exit).
// GEMV: for decode; GEMM (tensor cores): for many rows.
void moe_gate_up_gemv(HalfType type, const ExpertShape& s, const ExpertWeights& w, const MoeGroups& g,
                      const void* x, int32_t max_pairs, void* act, cudaStream_t stream, bool programmatic);
void moe_gate_up_gemm(HalfType type, const ExpertShape& s, const ExpertWeights& w, const MoeGroups& g,
                      const void* x, int32_t max_pairs, void* act, cudaStream_t stream, bool programmatic);

// y[r, :] = down_e · act[r] (+ its bias) (f32 [pairs, hidden]) for every grouped row r.
void moe_down_gemv(HalfType type, const ExpertShape& s, const ExpertWeights& w, const MoeGroups& g,
                   const void* act, int32_t max_pairs, float* y, cudaStream_t stream, bool programmatic);
void moe_down_gemm(HalfType type, const ExpertShape& s, const ExpertWeights& w, const MoeGroups& g,
                   const void* act, int32_t max_pairs, float* y, cudaStream_t stream, bool programmatic);

// out[t, :] = sum over j < top_k of weights[t, j] * y[pair_row[t * top_k + j], :], in the
// order of j (the same sum whatever the batch), f32.
void moe_combine(const float* y, const int32_t* pair_row, const float* weights, int32_t tokens, int32_t top_k,
                 int32_t hidden, float* out, cudaStream_t stream, bool programmatic);

}  // namespace spark::cuda
