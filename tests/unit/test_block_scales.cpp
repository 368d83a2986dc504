// test_block_scales.cpp — hostile GGUF files: a NaN or infinite block scale (d, m, dmin)
// in a quantized tensor is refused at load, naming the tensor, and mapped pages a load
// has copied out can be dropped without the mapping changing what it reads.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "engine/model/gguf.h"
#include "engine/model/model_loader.h"
#include "engine/model/quant.h"
#include "engine/util/mmap.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::golden_dir;

namespace {

// Half-float bit patterns that are not finite.
constexpr uint16_t kNaN = 0x7E00, kInf = 0x7C00, kMinusInf = 0xFC00;

// Where ggml's block structs keep their half-float scales (ggml-common.h), per format.
struct ScaleField {
  DType type;
  const char* tensor;  // in tests/golden/loader/quant.gguf
  size_t block_bytes, offset;
  const char* name;
};
const ScaleField kFields[] = {
    {DType::Q8_0, "t_q8_0", 34, 0, "d"},   {DType::Q4_0, "t_q4_0", 18, 0, "d"},
    {DType::Q4_1, "t_q4_1", 20, 0, "d"},   {DType::Q4_1, "t_q4_1", 20, 2, "m"},
    {DType::Q4_K, "t_q4_k", 144, 0, "d"},  {DType::Q4_K, "t_q4_k", 144, 2, "dmin"},
    {DType::Q5_K, "t_q5_k", 176, 0, "d"},  {DType::Q5_K, "t_q5_k", 176, 2, "dmin"},
    {DType::Q6_K, "t_q6_k", 210, 208, "d"},
};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string temp_path(const std::string& name, const std::string& suffix) {
  return (std::filesystem::temp_directory_path() / ("sparkd_" + name + "_" + std::to_string(::getpid()) + suffix)).string();
}

}  // namespace

TEST_CASE("block scales: the first non-finite d, m or dmin is found in every format") {
  GgufFile f = GgufFile::open(golden_dir() + "/quant.gguf");
  for (const ScaleField& s : kFields) {
    CAPTURE(s.tensor);
    CAPTURE(s.name);
    const GgufTensorInfo* info = f.find_tensor(s.tensor);
    REQUIRE(info != nullptr);
    REQUIRE(info->dtype == s.type);
    const auto* src = static_cast<const uint8_t*>(f.tensor_data(*info));
    std::vector<uint8_t> bytes(src, src + info->nbytes);
    CHECK_FALSE(find_nonfinite_block_scale(s.type, bytes.data(), bytes.size()).has_value());
    const size_t blocks = bytes.size() / s.block_bytes;
    REQUIRE(blocks >= 2);
    for (uint16_t bad : {kNaN, kInf, kMinusInf}) {
      std::vector<uint8_t> poked = bytes;
      std::memcpy(poked.data() + (blocks - 1) * s.block_bytes + s.offset, &bad, 2);
      const auto found = find_nonfinite_block_scale(s.type, poked.data(), poked.size());
      REQUIRE(found.has_value());
      CHECK(found->block == int64_t(blocks - 1));
      CHECK(std::string(found->field) == s.name);
      CHECK(std::isnan(found->value) == (bad == kNaN));
    }
    // The largest finite half (65504) is a legal, if odd, scale.
    std::vector<uint8_t> large = bytes;
    const uint16_t max_half = 0x7BFF;
    std::memcpy(large.data() + s.offset, &max_half, 2);
    CHECK_FALSE(find_nonfinite_block_scale(s.type, large.data(), large.size()).has_value());
  }
  std::vector<float> plain(64, NAN);  // plain types carry no block scales
  CHECK_FALSE(find_nonfinite_block_scale(DType::F32, plain.data(), plain.size() * 4).has_value());
}

TEST_CASE("block scales: a GGUF model with a NaN or infinite d is refused, naming the tensor") {
  const std::string source = "tests/golden/models/llama_q8_0.gguf";
  std::vector<uint8_t> bytes = read_file(source);
  size_t at = 0;
  {
    GgufFile f = GgufFile::open(source);
    const GgufTensorInfo* info = f.find_tensor("blk.0.ffn_up.weight");
    REQUIRE(info != nullptr);
    REQUIRE(info->dtype == DType::Q8_0);
    // Block 5: the second block of row 2 of [128, 64] (two 32-value blocks a row).
    at = size_t(static_cast<const uint8_t*>(f.tensor_data(*info)) - f.mapping()->data()) + 5 * 34;
  }
  const std::string path = temp_path("bad_scale", ".gguf");
  for (uint16_t bad : {kNaN, kInf}) {
    std::vector<uint8_t> poked = bytes;
    std::memcpy(poked.data() + at, &bad, 2);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(poked.data()), std::streamsize(poked.size()));
    const std::string msg = testing::input_error_of([&] { (void)load_model(config_for_model(path)); });
    CAPTURE(msg);
    CHECK(msg.find("'model.layers.0.mlp.up_proj.weight' (Q8_0) has a block scale d = " +
                   std::string(bad == kNaN ? "nan" : "inf") + " in block 5 (row 2)") != std::string::npos);
  }
  std::filesystem::remove(path);
  CHECK_NOTHROW((void)load_model(config_for_model(source)));
}

TEST_CASE("mmap: dropping copied pages keeps what the mapping reads") {
  const std::string path = temp_path("release", ".bin");
  std::vector<uint8_t> bytes(size_t(3) << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + (i >> 12));
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  auto m = MappedFile::open(path);
  REQUIRE(std::memcmp(m->data(), bytes.data(), bytes.size()) == 0);
  release_mapped_pages(m->data() + 1000, bytes.size() - 2000);  // unaligned ends
  release_mapped_pages(m->data() + bytes.size() - 10, 100);      // past the end: clipped
  std::vector<uint8_t> outside(16);
  release_mapped_pages(outside.data(), outside.size());  // not a mapping: nothing happens
  CHECK(std::memcmp(m->data(), bytes.data(), bytes.size()) == 0);
  const std::span<const uint8_t> whole = mapped_file_of(m->data() + 12345);
  CHECK(whole.data() == m->data());
  CHECK(whole.size() == bytes.size());
  CHECK(mapped_file_of(outside.data()).empty());
  release_mapped_pages(whole.data(), whole.size());
  CHECK(std::memcmp(m->data(), bytes.data(), bytes.size()) == 0);
  m.reset();
  CHECK(mapped_file_of(whole.data()).empty());  // unmapped: forgotten
  std::filesystem::remove(path);
}
