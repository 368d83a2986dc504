// mxfp4.cu — the MXFP4 upload (mxfp4.h): the file's blocks split into codes and scales.
#include "engine/backend/cuda/mxfp4.h"

#include <cstddef>

#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/model/quant.h"

namespace spark::cuda {
namespace {
constexpr int64_t kBlockValues = 32, kCodeBytes = 16;
constexpr size_t kAlign = 256;
size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
}  // namespace

size_t mxfp4_scales_offset(int64_t rows, int64_t k) { return align_up(size_t(rows) * size_t(k / 2)); }
size_t mxfp4_bytes(int64_t rows, int64_t k) {
  return mxfp4_scales_offset(rows, k) + align_up(size_t(rows) * size_t(k / kBlockValues));
}

void upload_mxfp4(const Tensor& t, void* codes, void* scales) {
  SPARK_CHECK(t.dtype == DType::MXFP4 && t.cols() % kBlockValues == 0 &&
                  t.nbytes == size_t(t.rows() * (t.cols() / kBlockValues)) * sizeof(BlockMXFP4),
              "upload_mxfp4: " + t.name + " is not rows of whole MXFP4 blocks");
  static_assert(sizeof(BlockMXFP4) == 1 + kCodeBytes && offsetof(BlockMXFP4, qs) == 1, "E8M0 scale, then codes");
  upload_split_blocks(t.data, t.rows() * (t.cols() / kBlockValues), sizeof(BlockMXFP4), 1, codes, scales);
}

}  // namespace spark::cuda
