// packed_gemm.h — the linear layer for many rows (prefill, wide decode buckets) over a
// weight matrix kept packed: tiles of the weights are decoded into shared memory and
// multiplied on tensor cores, so no 16-bit copy of the matrix is ever written.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

// y[rows, n] (row stride ldy >= n) = x[rows, k] · w[n, k]ᵀ with w one packed segment (no
// tail) of any packed format, x of the 16-bit `type` (16-byte aligned, k a multiple of the
// format's block), f32 accumulation of the weights rounded to `type`, y in `type` or f32.
// Capturable; `programmatic` as for gemv (gemv.h).
void packed_gemm(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
                 int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic = false);

}  // namespace spark::cuda
