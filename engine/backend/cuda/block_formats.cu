// block_formats.cu — the raw-block formats' host side (block_formats.h): which stored
// types stay packed, their row sizes, the upload, and the dispatch from a runtime
// WeightFormat to the launchers compiled per format.
#include "engine/backend/cuda/block_formats.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cuda/block_readers.cuh"
#include "engine/backend/cuda/common.cuh"
#include "engine/util/mmap.h"

namespace spark::cuda {

namespace {

// Calls f with BlockReader<F>'s format as a compile-time constant.
template <typename Fn>
decltype(auto) with_block_format(WeightFormat f, Fn&& fn) {
  switch (f) {
    case WeightFormat::Q4_0: return fn(std::integral_constant<WeightFormat, WeightFormat::Q4_0>{});
    case WeightFormat::Q4_1: return fn(std::integral_constant<WeightFormat, WeightFormat::Q4_1>{});
    case WeightFormat::Q4_K: return fn(std::integral_constant<WeightFormat, WeightFormat::Q4_K>{});
    case WeightFormat::Q5_K: return fn(std::integral_constant<WeightFormat, WeightFormat::Q5_K>{});
    case WeightFormat::Q6_K: return fn(std::integral_constant<WeightFormat, WeightFormat::Q6_K>{});
    case WeightFormat::HALF:
    case WeightFormat::Q8_0:
    case WeightFormat::FP8:
    case WeightFormat::MXFP4: break;
  }
  throw RuntimeError(std::string("not a raw-block weight format: ") + weight_format_name(f));
}

}  // namespace

std::optional<WeightFormat> packed_format(DType t) {
  switch (t) {
    case DType::Q8_0: return WeightFormat::Q8_0;
    case DType::Q4_0: return WeightFormat::Q4_0;
    case DType::Q4_1: return WeightFormat::Q4_1;
    case DType::Q4_K: return WeightFormat::Q4_K;
    case DType::Q5_K: return WeightFormat::Q5_K;
    case DType::Q6_K: return WeightFormat::Q6_K;
    case DType::F8_E4M3: return WeightFormat::FP8;
    case DType::MXFP4: return WeightFormat::MXFP4;
    default: return std::nullopt;
  }
}

bool is_raw_block_format(WeightFormat f) {
  return f != WeightFormat::HALF && f != WeightFormat::Q8_0 && f != WeightFormat::FP8 && f != WeightFormat::MXFP4;
}

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::HALF: return "16-bit";
    case WeightFormat::Q8_0: return "Q8_0";
    case WeightFormat::Q4_0: return "Q4_0";
    case WeightFormat::Q4_1: return "Q4_1";
    case WeightFormat::Q4_K: return "Q4_K";
    case WeightFormat::Q5_K: return "Q5_K";
    case WeightFormat::Q6_K: return "Q6_K";
    case WeightFormat::FP8: return "FP8";
    case WeightFormat::MXFP4: return "MXFP4";
  }
  return "?";
}

int64_t block_values(WeightFormat f) {
  if (f == WeightFormat::Q8_0 || f == WeightFormat::MXFP4) return 32;
  if (f == WeightFormat::FP8) return 16;  // fp8.h's unit of 16 values
  return with_block_format(f, [](auto F) -> int64_t { return BlockReader<decltype(F)::value>::kBlockValues; });
}

int64_t block_row_bytes(WeightFormat f, int64_t k) {
  return with_block_format(f, [k](auto F) -> int64_t {
    using R = BlockReader<decltype(F)::value>;
    return k / R::kBlockValues * R::kBlockBytes;
  });
}

void gemv_blocks(WeightFormat f, HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n,
                 void* y, int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  with_block_format(f, [&](auto F) { gemv_blocks<decltype(F)::value>(type, x, rows, k, w, n, y, ldy, out, stream, programmatic); });
}

void embedding_gather_blocks(WeightFormat f, const int32_t* token_ids, int32_t num_tokens, const void* table,
                             int64_t vocab, int32_t hidden, float* out, cudaStream_t stream) {
  with_block_format(f, [&](auto F) {
    embedding_gather_blocks<decltype(F)::value>(token_ids, num_tokens, table, vocab, hidden, out, stream);
  });
}

void upload_blocks(const Tensor& t, void* dst) {
  const std::optional<WeightFormat> f = packed_format(t.dtype);
  SPARK_CHECK(f && is_raw_block_format(*f) && t.cols() % block_values(*f) == 0 &&
                  t.nbytes == size_t(t.rows() * block_row_bytes(*f, t.cols())),
              "upload_blocks: " + t.name + " is not rows of whole blocks of a raw-block format");
  upload_bytes(dst, t.data, t.nbytes);
}

void upload_bytes(void* dst, const void* src, size_t bytes) {
  for (size_t off = 0; off < bytes; off += kUploadChunk) {
    const size_t n = std::min(kUploadChunk, bytes - off);
    const char* from = static_cast<const char*>(src) + off;
    CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst) + off, from, n, cudaMemcpyHostToDevice));
    release_mapped_pages(from, n);
  }
}

void upload_split_blocks(const void* src, int64_t count, size_t block_bytes, size_t scale_bytes, void* codes,
                         void* scales) {
  const size_t code_bytes = block_bytes - scale_bytes;
  const int64_t chunk = std::max<int64_t>(1, int64_t(kUploadChunk / block_bytes));
  std::vector<uint8_t> q(size_t(std::min(count, chunk)) * code_bytes), s(size_t(std::min(count, chunk)) * scale_bytes);
  const auto* from = static_cast<const uint8_t*>(src);
  for (int64_t b0 = 0; b0 < count; b0 += chunk) {
    const size_t n = size_t(std::min(chunk, count - b0));
    for (size_t b = 0; b < n; ++b) {
      const uint8_t* block = from + (size_t(b0) + b) * block_bytes;
      std::memcpy(s.data() + b * scale_bytes, block, scale_bytes);
      std::memcpy(q.data() + b * code_bytes, block + scale_bytes, code_bytes);
    }
    CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(codes) + size_t(b0) * code_bytes, q.data(), n * code_bytes,
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(scales) + size_t(b0) * scale_bytes, s.data(), n * scale_bytes,
                          cudaMemcpyHostToDevice));
    release_mapped_pages(from + size_t(b0) * block_bytes, n * block_bytes);
  }
}

}  // namespace spark::cuda
