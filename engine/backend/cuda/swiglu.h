// swiglu.h — launchers for the MLP activations: SwiGLU of the fused gate/up projection, the
// squared ReLU of Nemotron-H's ungated up projection, and encoders' biased exact GELU.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace spark::cuda {

// gate_up is [rows, 2 * inter] T (the compute type, __nv_bfloat16 or __half): gate in the
// first `inter` columns, up in the rest. out[t, i] = silu(gate[t, i]) * up[t, i] in f32
// (gelu_tanh: Gemma's gelu_tanh(gate) * up, as cpu::gelu_tanh_mul), rounded to T; out is
// [rows, inter]. programmatic: a programmatic dependent launch (launch_kernel in
// common.cuh; sm_90 and later only).
template <typename T>
void swiglu(const T* gate_up, int32_t rows, int32_t inter, T* out, cudaStream_t stream, bool programmatic = false,
            bool gelu_tanh = false);

// x[i] = max(x[i], 0)^2 in place for i < n (T as above; computed in f32, rounded to T), as
// cpu::relu2. n a multiple of 8 and x 16-byte aligned.
template <typename T>
void relu2(T* x, int64_t n, cudaStream_t stream, bool programmatic = false);

// x[t, i] = gelu(x[t, i] + bias[i]) in place for t < rows, i < n, with the exact (erf) GELU
// v * Phi(v) as cpu::gelu (T as above; computed in f32 from the T value, rounded to T). x is
// the up projection's output [rows, n], bias [n] f32; n a multiple of 8, both 16-byte aligned.
template <typename T>
void bias_gelu(T* x, const float* bias, int32_t rows, int32_t n, cudaStream_t stream, bool programmatic = false);

}  // namespace spark::cuda
