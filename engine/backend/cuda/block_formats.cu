// block_formats.cu — the packed formats' host side (block_formats.h): one table of the
// device formats (name, block geometry, the launchers compiled per raw-block format) and
// one of which stored types stay packed in which, their row sizes, and the upload.
#include "engine/backend/cuda/block_formats.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "engine/backend/cuda/block_readers.cuh"
#include "engine/backend/cuda/common.cuh"
#include "engine/util/mmap.h"

namespace spark::cuda {

namespace {

using GemvLauncher = void (*)(HalfType, const void*, int32_t, int32_t, const void*, int32_t, void*, int32_t, GemmOut,
                              cudaStream_t, bool);
using GatherLauncher = void (*)(const int32_t*, int32_t, const void*, int64_t, int32_t, float*, cudaStream_t);

// One row per WeightFormat, in the enum's order: its name, the values of one block (0 for
// HALF, which has none), its block bytes and launchers where the device keeps the file's
// blocks as they are (the raw-block formats, compiled per format from BlockReader<F>).
struct FormatRow {
  WeightFormat format;
  const char* name;
  int64_t block_values;
  int64_t block_bytes;     // raw-block formats only
  GemvLauncher gemv;       // nullptr: not a raw-block format
  GatherLauncher gather;
};

template <WeightFormat F>
constexpr FormatRow raw_blocks(const char* name) {
  return {F, name, BlockReader<F>::kBlockValues, BlockReader<F>::kBlockBytes, gemv_blocks<F>,
          embedding_gather_blocks<F>};
}
constexpr FormatRow split(WeightFormat f, const char* name, int64_t block_values) {
  return {f, name, block_values, 0, nullptr, nullptr};
}

constexpr std::array<FormatRow, size_t(WeightFormat::COUNT)> kFormats{{
    split(WeightFormat::HALF, "16-bit", 0),
    split(WeightFormat::Q8_0, "Q8_0", 32),  // codes and scales apart (q8_0.h)
    raw_blocks<WeightFormat::Q4_0>("Q4_0"),
    raw_blocks<WeightFormat::Q4_1>("Q4_1"),
    raw_blocks<WeightFormat::Q4_K>("Q4_K"),
    raw_blocks<WeightFormat::Q5_K>("Q5_K"),
    raw_blocks<WeightFormat::Q6_K>("Q6_K"),
    split(WeightFormat::FP8, "FP8", 16),  // fp8.h's unit of 16 values
    split(WeightFormat::MXFP4, "MXFP4", 32),
    split(WeightFormat::NVFP4, "NVFP4", 64),  // the file's blocks and a scale a row (nvfp4.h)
    raw_blocks<WeightFormat::Q5_0>("Q5_0"),
    raw_blocks<WeightFormat::Q5_1>("Q5_1"),
}};

// One row per DType, in the enum's order: the packed device format a stored tensor of
// that type keeps, or none (it becomes the compute type).
struct PackedRow {
  DType type;
  std::optional<WeightFormat> format;
};
constexpr std::array<PackedRow, size_t(DType::COUNT)> kPacked{{
    {DType::F64, {}},
    {DType::F32, {}},
    {DType::F16, {}},
    {DType::BF16, {}},
    {DType::I64, {}},
    {DType::I32, {}},
    {DType::I16, {}},
    {DType::I8, {}},
    {DType::U8, {}},
    {DType::BOOL, {}},
    {DType::F8_E4M3, WeightFormat::FP8},
    {DType::F8_E5M2, {}},
    {DType::Q4_0, WeightFormat::Q4_0},
    {DType::Q4_1, WeightFormat::Q4_1},
    {DType::Q8_0, WeightFormat::Q8_0},
    {DType::Q4_K, WeightFormat::Q4_K},
    {DType::Q5_K, WeightFormat::Q5_K},
    {DType::Q6_K, WeightFormat::Q6_K},
    {DType::MXFP4, WeightFormat::MXFP4},
    {DType::NVFP4, WeightFormat::NVFP4},
    {DType::Q5_0, WeightFormat::Q5_0},
    {DType::Q5_1, WeightFormat::Q5_1},
}};

constexpr bool rows_in_order() {
  for (size_t i = 0; i < kFormats.size(); ++i)
    if (kFormats[i].format != WeightFormat(i)) return false;
  for (size_t i = 0; i < kPacked.size(); ++i)
    if (kPacked[i].type != DType(i)) return false;
  return true;
}
static_assert(rows_in_order(), "block_formats.cu: one row per WeightFormat and per DType, in the enums' order");

const FormatRow& row_of(WeightFormat f) {
  SPARK_CHECK(size_t(f) < kFormats.size(), "not a WeightFormat: " + std::to_string(int(f)));
  return kFormats[size_t(f)];
}

// The row of a raw-block format; throws for the others.
const FormatRow& raw_row_of(WeightFormat f) {
  const FormatRow& r = row_of(f);
  if (r.gemv == nullptr) throw RuntimeError(std::string("not a raw-block weight format: ") + r.name);
  return r;
}

}  // namespace

std::optional<WeightFormat> packed_format(DType t) {
  return size_t(t) < kPacked.size() ? kPacked[size_t(t)].format : std::nullopt;
}

bool is_raw_block_format(WeightFormat f) { return row_of(f).gemv != nullptr; }

const char* weight_format_name(WeightFormat f) { return size_t(f) < kFormats.size() ? kFormats[size_t(f)].name : "?"; }

int64_t block_values(WeightFormat f) {
  const FormatRow& r = row_of(f);
  return r.block_values > 0 ? r.block_values : raw_row_of(f).block_values;  // HALF: throws
}

int64_t block_row_bytes(WeightFormat f, int64_t k) {
  const FormatRow& r = raw_row_of(f);
  return k / r.block_values * r.block_bytes;
}

void gemv_blocks(WeightFormat f, HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n,
                 void* y, int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  raw_row_of(f).gemv(type, x, rows, k, w, n, y, ldy, out, stream, programmatic);
}

void embedding_gather_blocks(WeightFormat f, const int32_t* token_ids, int32_t num_tokens, const void* table,
                             int64_t vocab, int32_t hidden, float* out, cudaStream_t stream) {
  raw_row_of(f).gather(token_ids, num_tokens, table, vocab, hidden, out, stream);
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
