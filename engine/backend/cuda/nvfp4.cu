// nvfp4.cu — the NVFP4 linear layer (nvfp4.h): its GEMV, block_gemv.cuh's shared kernel
// over weight_readers.cuh's Nvfp4Rows, streams the file's 36-byte blocks once and decodes
// them in registers; and the upload.
//
// Bytes. A block holds 64 weights in 36 bytes (four E4M3 sub-block scales, 32 bytes of
// E2M1 codes): 0.5625 bytes a weight, 28% of BF16, and one f32 scale a row (4 / k bytes a
// weight: 0.1% at k = 4096). Llama-3.1-8B in NVFP4 (BF16 embedding, NVFP4 LM head) reads
// ~4.6 GB a token at batch 1: ~47 tokens/s at GB10's ~218 GB/s, ~650 at H100's ~3.0 TB/s;
// Qwen3-30B-A3B (3.3B active) ~2.2 GB: ~99 and ~1,360.
//
// Instructions. Per weight: shift and mask, the E2M1 code to f32 built from its bits
// (~4), one multiply by the sub-block scale (the row's scale multiplies the row's sum
// once, weight_readers.cuh's row_scale); per weight and activation row an x convert and
// an FMA: about 6 + 2r lane operations a weight. GB10 streams 218e9 / 0.5625 ≈ 388e9
// weights/s against ~15e12 lane operations/s (~39 a weight): bandwidth-bound up to 8
// rows. H100 streams ~5.3e12 weights/s against ~30e12 (~6 a weight): issue-bound beyond
// one row (~1.3x at one, ~3.7x at eight); the bit-trick decode of the GPU-concurrency
// work is what closes it.
//
// Loads in flight: one lane decodes one 32-value half of a block (two sub-blocks: 16
// code bytes and their 2 scale bytes, four-byte words through the read-only cache); a
// warp step is 16 blocks, 576 contiguous bytes, each byte read by one lane.
#include "engine/backend/cuda/nvfp4.h"

#include <algorithm>
#include <string>
#include <vector>

#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/block_gemv.cuh"
#include "engine/backend/cuda/common.cuh"
#include "engine/model/nvfp4_weights.h"
#include "engine/util/mmap.h"

namespace spark::cuda {
namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }
}  // namespace

size_t nvfp4_scales_offset(int64_t rows, int64_t k) { return align_up(size_t(rows) * size_t(nvfp4_row_bytes(k))); }
size_t nvfp4_bytes(int64_t rows, int64_t k) { return nvfp4_scales_offset(rows, k) + align_up(size_t(rows) * 4); }

void gemv_nvfp4(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
                int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(w.format == WeightFormat::NVFP4 && w.data && w.scales, "gemv_nvfp4: not an NVFP4 matrix");
  SPARK_CHECK(k > 0 && k % 64 == 0, "gemv_nvfp4: k must be a multiple of 64, got " + std::to_string(k));
  SPARK_CHECK((reinterpret_cast<uintptr_t>(w.data) & 3) == 0, "gemv_nvfp4: blocks must be 4-byte aligned");
  launch_gemv_rows("gemv_nvfp4", Nvfp4Rows{static_cast<const uint8_t*>(w.data), static_cast<const float*>(w.scales),
                                           nvfp4_row_bytes(k)},
                   type, x, rows, k, n, y, ldy, out, stream, programmatic);
}

void upload_nvfp4(const Tensor& t, void* data, float* scales) {
  SPARK_CHECK(t.dtype == DType::NVFP4 && t.shape.size() == 2 && t.cols() % 64 == 0 &&
                  t.nbytes == size_t(t.rows() * nvfp4_row_bytes(t.cols())),
              "upload_nvfp4: " + t.name + " is not rows of whole NVFP4 blocks");
  SPARK_CHECK(t.scale == nullptr || t.scale_block_rows >= t.rows(), "upload_nvfp4: " + t.name + " has one scale");
  if (t.modelopt_block_scales) {
    // ModelOpt's layout: repacked a band of rows at a time into a bounded host buffer, the
    // file's pages dropped behind it, so the model is never held twice on the host.
    const int64_t cols = t.cols(), row_bytes = nvfp4_row_bytes(cols);
    const int64_t band = std::max<int64_t>(1, int64_t(kUploadChunk) / row_bytes);
    std::vector<uint8_t> blocks(size_t(std::min(band, t.rows()) * row_bytes));
    for (int64_t r0 = 0; r0 < t.rows(); r0 += band) {
      const int64_t n = std::min(band, t.rows() - r0);
      nvfp4_rows(t, r0, n, blocks.data());
      CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(data) + r0 * row_bytes, blocks.data(), size_t(n * row_bytes),
                            cudaMemcpyHostToDevice));
      release_mapped_pages(static_cast<const uint8_t*>(t.data) + r0 * cols / 2, size_t(n * cols / 2));
      release_mapped_pages(t.modelopt_block_scales + r0 * cols / 16, size_t(n * cols / 16));
    }
  } else {
    upload_bytes(data, t.data, t.nbytes);
  }
  const std::vector<float> per_row(size_t(t.rows()), t.scale ? t.scale[0] : 1.0f);
  CUDA_CHECK(cudaMemcpy(scales, per_row.data(), per_row.size() * sizeof(float), cudaMemcpyHostToDevice));
}

}  // namespace spark::cuda
