// packed_gemm.h — the linear layer for many rows (prefill, wide decode buckets) over a
// weight matrix kept packed: tiles of the weights are decoded into shared memory and
// multiplied on tensor cores, so no 16-bit copy of the matrix is ever written.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

// Device memory the kernels may use for split-K partial sums (f32), and the device's SM
// count the split is sized for. No data: never split.
struct PackedScratch {
  void* data = nullptr;
  size_t bytes = 0;
  int sms = 0;
};

// y[rows, n] (row stride ldy >= n) = x[rows, k] · w[n, k]ᵀ with w one packed segment (no
// tail) of any packed format, x of the 16-bit `type` (16-byte aligned, k a multiple of the
// format's block), f32 accumulation of the weights rounded to `type`, y in `type` or f32.
// Up to 64 rows take one row tile (each weight decoded once) and, when the grid would leave
// SMs idle, split k over `scratch`. Capturable; `programmatic` as for gemv (gemv.h).
// How many ways packed_gemm splits k for this shape (1: not split).
int packed_gemm_splits(int32_t rows, int32_t k, int32_t n, const PackedScratch& scratch);

void packed_gemm(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
                 int32_t ldy, GemmOut out, const PackedScratch& scratch, cudaStream_t stream,
                 bool programmatic = false);

}  // namespace spark::cuda
