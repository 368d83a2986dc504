// boundary.h — the hidden states at a pipeline stage boundary, between the f32 residual
// stream and the 16-bit values a device-to-device link (NCCL) carries.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace spark::cuda {

// out[i] = x[i] rounded to T (__nv_bfloat16 or __half), for n values (n % 8 == 0, both
// 16-byte aligned): what the first stage sends.
template <typename T>
void hidden_to_16bit(const float* x, int64_t n, T* out, cudaStream_t stream);
// x[i] = in[i] as f32: the later stage's residual stream, read from the receive buffer.
template <typename T>
void hidden_from_16bit(const T* in, int64_t n, float* x, cudaStream_t stream);

}  // namespace spark::cuda
