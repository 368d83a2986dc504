// q8_0.h — linear layers over Q8_0 weights kept packed on the device (DeviceMatrix in
// kernel_args.h): the decode GEMV that reads the packed bytes once (Gemm::linear routes
// many rows to packed_gemm.h's tiles), and the upload.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/kernel_args.h"
#include "engine/model/tensor.h"

namespace spark::cuda {

// y[rows, n] (row stride ldy >= n) = x[rows, k] · w[n, k]ᵀ with w a Q8_0 DeviceMatrix, x
// of the 16-bit `type`, f32 accumulation, y in `type` or f32. 1 <= rows <= kGemvMaxRows, k a multiple of 32,
// x 16-byte aligned. Capturable; `programmatic` as for gemv (gemv.h).
void gemv_q8_0(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
               int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic = false);

// Repacks the Q8_0 tensor t ([rows, k] in GGUF blocks) into a DeviceMatrix's two arrays
// (kernel_args.h): its quants to `qs`, its scales to `scales` (device memory), a bounded
// chunk of rows at a time.
void upload_q8_0(const Tensor& t, void* qs, void* scales);

}  // namespace spark::cuda
