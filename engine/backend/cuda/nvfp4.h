// nvfp4.h — linear layers over NVFP4 weights kept packed on the device (WeightFormat::NVFP4,
// kernel_args.h): the decode GEMV that reads the file's blocks once, and the upload. Many
// activation rows go through packed_gemm.h's tiles, MoE experts through moe_experts.h;
// both read the blocks with weight_readers.cuh's Nvfp4Rows as this GEMV does.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/kernel_args.h"
#include "engine/model/tensor.h"

namespace spark::cuda {

// Bytes of a row of k NVFP4 values (k / 64 blocks of 36 bytes).
inline int64_t nvfp4_row_bytes(int64_t k) { return k / 64 * 36; }
// Device bytes of `rows` rows of k values: the blocks, then from nvfp4_scales_offset one
// f32 scale a row, each part 256-byte aligned.
size_t nvfp4_scales_offset(int64_t rows, int64_t k);
size_t nvfp4_bytes(int64_t rows, int64_t k);

// y[rows, n] (row stride ldy >= n) = x[rows, k] · w[n, k]ᵀ with w an NVFP4 DeviceMatrix,
// x of the 16-bit `type`, f32 accumulation, y in `type` or f32. 1 <= rows <= kGemvMaxRows,
// k a multiple of 64, x 16-byte aligned. Capturable; `programmatic` as for gemv (gemv.h).
void gemv_nvfp4(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
                int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic = false);

// Copies the NVFP4 tensor t ([rows, k] of GGUF blocks) to `data` as it is, and its scale
// (Tensor::scale: one per tensor, 1 when none) to `scales`, once for each of its rows.
void upload_nvfp4(const Tensor& t, void* data, float* scales);

}  // namespace spark::cuda
