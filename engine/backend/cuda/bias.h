// bias.h — adds a bias vector to f32 rows: gpt-oss's output-projection bias, added to the
// projection's f32 output before it joins the residual stream.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace spark::cuda {

// y[t, i] += bias[i] for t < rows, i < n (f32). programmatic: a programmatic dependent
// launch (launch_kernel in common.cuh; sm_90 and later only).
void add_bias_f32(float* y, const float* bias, int32_t rows, int32_t n, cudaStream_t stream, bool programmatic = false);

}  // namespace spark::cuda
