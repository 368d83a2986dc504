// gemv.h — the decode-time linear layer: y[rows, n] = x[rows, k] · w[n, k]ᵀ for 1..8
// activation rows. At decode the weights are read once per step and the arithmetic is
// negligible, so this kernel only has to stream w from memory at the copy bandwidth;
// Gemm (gemm.h) routes small batches here and everything else to cuBLASLt.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

// The most activation rows one launch takes: the tensor-core tile's 8 columns.
inline constexpr int32_t kGemvMaxRows = 8;

// Same contract as Gemm::linear: row-major, x and w both of the 16-bit `type` (bf16 or
// f16), f32 accumulation, y in `type` (GemmOut::HALF) or f32. 1 <= rows <= kGemvMaxRows,
// k a multiple of 8, x and w 16-byte aligned. No allocation and no synchronisation:
// capturable in a CUDA graph once the kernel has run outside capture.
// programmatic (sm_90 and later only): the launch may start before the kernel ahead of
// it in `stream` has finished (programmatic dependent launch) and stream w meanwhile, so
// w must not be that kernel's output (weights never are); x and y are touched only after
// it completes.
void gemv(HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n, void* y, GemmOut out,
          cudaStream_t stream, bool programmatic = false);

}  // namespace spark::cuda
