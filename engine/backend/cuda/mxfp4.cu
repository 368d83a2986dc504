// mxfp4.cu — the MXFP4 upload (mxfp4.h): the file's blocks split into codes and scales.
#include "engine/backend/cuda/mxfp4.h"

#include <cstddef>
#include <string>

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
  // The device decode folds 2^14 into the scale (weight_readers.cuh's Mxfp4Rows), which
  // holds up to 2^113: a scale of 2^114 and more (but infinity, 255) would read as
  // infinite. No trained weight is near it.
  const auto* blocks = static_cast<const BlockMXFP4*>(t.data);
  for (int64_t b = 0; b < t.rows() * (t.cols() / kBlockValues); ++b)
    if (blocks[b].e > 240 && blocks[b].e < 255)
      throw InputError(t.name + ": MXFP4 block " + std::to_string(b) + " has the scale 2^" +
                       std::to_string(int(blocks[b].e) - 127) + "; the CUDA backend takes scales up to 2^113");
  upload_split_blocks(t.data, t.rows() * (t.cols() / kBlockValues), sizeof(BlockMXFP4), 1, codes, scales);
}

}  // namespace spark::cuda
