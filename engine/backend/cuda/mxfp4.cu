// mxfp4.cu — the MXFP4 upload (mxfp4.h): the file's blocks split into codes and scales.
#include "engine/backend/cuda/mxfp4.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/model/quant.h"
#include "engine/util/mmap.h"

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
  const int64_t rows = t.rows(), blocks = t.cols() / kBlockValues;
  const int64_t chunk_rows = std::max<int64_t>(1, int64_t(kUploadChunk) / (blocks * kCodeBytes));
  std::vector<uint8_t> q(size_t(std::min(rows, chunk_rows) * blocks * kCodeBytes));
  std::vector<uint8_t> e(size_t(std::min(rows, chunk_rows) * blocks));
  const auto* src = static_cast<const BlockMXFP4*>(t.data);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t n = std::min(chunk_rows, rows - r0);
    for (int64_t b = 0; b < n * blocks; ++b) {
      const BlockMXFP4& block = src[r0 * blocks + b];
      e[size_t(b)] = block.e;
      std::memcpy(q.data() + b * kCodeBytes, block.qs, kCodeBytes);
    }
    CUDA_CHECK(cudaMemcpy(static_cast<char*>(codes) + r0 * blocks * kCodeBytes, q.data(), size_t(n * blocks * kCodeBytes),
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(static_cast<char*>(scales) + r0 * blocks, e.data(), size_t(n * blocks), cudaMemcpyHostToDevice));
    release_mapped_pages(src + r0 * blocks, size_t(n * blocks) * sizeof(BlockMXFP4));
  }
}

}  // namespace spark::cuda
