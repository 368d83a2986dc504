// rms_norm.h — launchers for the fused residual add + RMSNorm (or an encoder's post-norm
// LayerNorm), and plain RMSNorms of rows.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace spark::cuda {

// For each of `rows` rows of `hidden` values: x += delta (skipped when delta is null),
// then out = x / sqrt(mean(x^2) + eps) * weight, rounded to T. When out is null only the
// add happens (the last layer's output before the final norm). x is the f32 residual
// stream; delta is a projection's output, in f32 too: the few "massive activations" of
// llama-family models exceed FP16's range there. T is the compute type (__nv_bfloat16 or
// __half). programmatic: a programmatic dependent launch (launch_kernel in common.cuh;
// sm_90 and later only).
template <typename T>
void add_rms_norm(float* x, const float* delta, const float* weight, int32_t rows, int32_t hidden, float eps, T* out,
                  cudaStream_t stream, bool programmatic = false);

// A delta given as a weighted sum of rows of another matrix: delta[r, :] = sum over j <
// terms of weights[r * terms + j] * rows[row_of[r * terms + j], :], each term an fmaf
// onto the sum from 0 in the order of j (moe_combine's sum, moe_experts.h): the MoE block's
// grouped expert outputs, added to x without the [rows, hidden] round trip through memory
// that combining them first takes. terms <= 32.
struct WeightedRows {
  const float* rows = nullptr;  // [*, hidden] f32
  const int32_t* row_of = nullptr;
  const float* weights = nullptr;
  int32_t terms = 0;
};

// add_rms_norm with x += that sum: the same bits as moe_combine into a buffer and
// add_rms_norm of it.
template <typename T>
void add_rms_norm(float* x, const WeightedRows& delta, const float* weight, int32_t rows, int32_t hidden, float eps,
                  T* out, cudaStream_t stream, bool programmatic = false);

// An encoder's post-norm (NormPlacement::POST), for each of `rows` rows of `hidden` values:
// x = LayerNorm(x + (delta + delta_bias)) = (y - mean(y)) / sqrt(var(y) + eps) * weight + bias
// with y the sum, written back to x in f32, and the same rounded to T into out (the next
// GEMM's input). delta ([rows, hidden] f32, a projection's output) and delta_bias
// ([hidden] f32, that projection's bias) may each be null. The mean is taken out before
// the variance, as torch and cpu::layer_norm do. T is the compute type.
template <typename T>
void add_layer_norm(float* x, const float* delta, const float* delta_bias, const float* weight, const float* bias,
                    int32_t rows, int32_t hidden, float eps, T* out, cudaStream_t stream, bool programmatic = false);

// The final norm on the rows whose logits are wanted only: out[r] = rmsnorm(x[row_ids[r]]).
template <typename T>
void rms_norm_rows(const float* x, const int32_t* row_ids, int32_t rows, const float* weight, int32_t hidden, float eps,
                   T* out, cudaStream_t stream, bool programmatic = false);

// out[r] = rmsnorm(x[r]) with out's rows out_stride values apart (a multiple of 8): the
// norm into one part of wider rows (an MTP head's [embedding; hidden] pairs, mtp_input.h);
// T may be float too (the final hidden rows a step returns).
template <typename T>
void rms_norm_strided(const float* x, int32_t rows, const float* weight, int32_t hidden, float eps, T* out,
                      int64_t out_stride, cudaStream_t stream, bool programmatic = false);

}  // namespace spark::cuda
