// fp8.h — linear layers over an FP8 checkpoint's e4m3 weights kept packed on the device
// (WeightFormat::FP8, kernel_args.h): the decode GEMV that reads the e4m3 bytes once, and
// the upload (many rows go through packed_gemm.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/kernel_args.h"
#include "engine/model/tensor.h"

namespace spark::cuda {

// y[rows, n] (row stride ldy >= n) = x[rows, k] · w[n, k]ᵀ with w an FP8 DeviceMatrix,
// x of the 16-bit `type`, f32 accumulation, y in `type` or f32. 1 <= rows <=
// kGemvMaxRows, k and the scale block's columns multiples of 16, x 16-byte aligned.
// Capturable; `programmatic` as for gemv (gemv.h).
void gemv_fp8(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
              int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic = false);

// Device bytes of the scale grid of t (an F8_E4M3 tensor with scales), and the upload of
// its e4m3 bytes to `data` (t.nbytes) and its scales to `scales`.
size_t fp8_scale_bytes(const Tensor& t);
void upload_fp8(const Tensor& t, void* data, void* scales);

}  // namespace spark::cuda
