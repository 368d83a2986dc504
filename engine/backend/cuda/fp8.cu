// fp8.cu — the FP8 (e4m3 weights, f32 block / channel / tensor scales) linear layer
// (fp8.h): its GEMV, block_gemv.cuh's shared kernel over weight_readers.cuh's Fp8Rows,
// streams the e4m3 bytes once and decodes in registers (many rows go through
// packed_gemm.h's tiles); and the upload.
//
// Bytes. One byte a weight plus a 4-byte scale per 128x128 block (0.02%) or per row
// (4 / k): half of BF16. Qwen3-8B-FP8 reads ~7.6 GB a token at batch 1 (its BF16
// embedding gathered a row at a time, the BF16 LM head 1.2 GB of it), so GB10 (~218 GB/s
// measured copy) tops out near 29 tokens/s and H100 (~3.0 TB/s) near 390.
//
// Instructions. Per weight: one e4m3 -> f16 convert and one f16 -> f32 (sm_89 and later
// convert e4m3 pairs in one instruction) and the scale multiply; per weight and activation
// row: one x convert and one FMA; per 16 weights one scale load. About 2 + 2r lane operations a
// weight. GB10 streams ~218e9 weights/s against ~15e12 lane operations/s (~69 a weight):
// bandwidth-bound at every row count up to 8. H100 streams ~3.0e12 weights/s against
// ~30e12 (~10 a weight): bandwidth-bound up to 4 rows, issue-bound beyond (8 rows: ~18,
// ~1.8x the weight stream's time); cuBLASLt's FP8 tensor-core GEMM on 8-bit activations
// would take over there, as for prefill.
//
// Layout (block_gemv.cuh's gemv_rows_kernel over weight_readers.cuh's Fp8Rows): one warp
// per weight row, each lane 16 e4m3 bytes a step with one 16-byte
// non-allocating load (a warp step is 512 contiguous bytes), the scale of those 16 values
// through the read-only cache (16 values never straddle a scale block: block columns are
// a multiple of 16), and the matching 16 activations of each row. As in q8_0.cu, the next
// step's weights are requested before the current step is multiplied: 512 bytes in flight
// a warp; H100 wants ~18 KB a SM (36 warps), GB10 ~3 KB (6 warps).
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/block_gemv.cuh"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/fp8.h"

#include <algorithm>
#include <string>

namespace spark::cuda {
namespace {

constexpr int kLaneValues = 16;  // Fp8Rows::kValues: a scale block holds whole units of 16

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// The matrix as one stack of one matrix for Fp8Rows (weight_readers.cuh), after checking it.
Fp8Rows rows_of(const DeviceMatrix& w, int32_t k, int32_t n, const char* who) {
  SPARK_CHECK(w.format == WeightFormat::FP8 && w.data && w.scales, std::string(who) + ": not an FP8 matrix");
  SPARK_CHECK(k > 0 && k % kLaneValues == 0 && w.scale_block_rows > 0 && w.scale_block_cols > 0 &&
                  (w.scale_block_cols % kLaneValues == 0 || w.scale_block_cols >= k),
              std::string(who) + ": k and the scale block's columns must be multiples of 16");
  SPARK_CHECK(aligned16(w.data), std::string(who) + ": weights must be 16-byte aligned");
  const int32_t grid_cols = int32_t(ceil_div(k, w.scale_block_cols));
  const int32_t grid_rows = int32_t(ceil_div(std::max(n, 1), w.scale_block_rows));
  return Fp8Rows{static_cast<const uint8_t*>(w.data), static_cast<const float*>(w.scales), k, std::max(n, 1),
                 w.scale_block_rows, w.scale_block_cols, grid_cols, grid_rows * grid_cols};
}

}  // namespace

void gemv_fp8(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
              int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  launch_gemv_rows("gemv_fp8", rows_of(w, k, n, "gemv_fp8"), type, x, rows, k, n, y, ldy, out, stream, programmatic);
}

size_t fp8_scale_bytes(const Tensor& t) { return size_t(t.scale_grid_rows() * t.scale_grid_cols()) * 4; }

void upload_fp8(const Tensor& t, void* data, void* scales) {
  SPARK_CHECK(t.dtype == DType::F8_E4M3 && t.scale && t.shape.size() == 2,
              "upload_fp8: " + t.name + " is not an FP8 matrix with scales");
  upload_bytes(data, t.data, t.nbytes);
  CUDA_CHECK(cudaMemcpy(scales, t.scale, fp8_scale_bytes(t), cudaMemcpyHostToDevice));
}

}  // namespace spark::cuda
