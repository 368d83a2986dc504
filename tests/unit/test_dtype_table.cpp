// test_dtype_table.cpp — the one table of element types: lookups by GGUF id and by
// safetensors name, and the lists error messages print. (The decoders and block sizes are
// held to gguf-py by test_quant.cpp and test_block_scales.cpp, through this table.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/model/dtype_table.h"

using namespace spark;

TEST_CASE("dtype table: every type has one row, its name and GGUF id unique") {
  std::set<std::string> names;
  std::set<int32_t> ids;
  for (size_t i = 0; i < size_t(DType::COUNT); ++i) {
    const DTypeInfo& r = dtype_info(DType(i));
    CHECK(r.type == DType(i));
    CHECK(names.insert(r.name).second);
    if (r.ggml_type >= 0) {
      CHECK(ids.insert(r.ggml_type).second);
      CHECK(dtype_of_ggml_type(uint32_t(r.ggml_type)) == &r);
    }
    if (r.in_safetensors) CHECK(dtype_of_safetensors_name(r.name) == &r);
    CHECK(dtype_name(DType(i)) == r.name);
    CHECK(r.block_elems >= 1);
    CHECK(r.block_bytes >= 1);
    // A block-quantized type carries a half-float scale the NaN check reads, or says why
    // not (MXFP4's E8M0; NVFP4's E4M3, which check_nvfp4_block_scales reads).
    if (r.block_elems > 1 && r.type != DType::MXFP4 && r.type != DType::NVFP4) CHECK(r.scales[0].field != nullptr);
  }
}

TEST_CASE("dtype table: lookups miss what no row has") {
  CHECK(dtype_of_ggml_type(10) == nullptr);  // Q2_K
  CHECK(dtype_of_ggml_type(1000) == nullptr);
  CHECK(dtype_of_safetensors_name("Q4_K") == nullptr);  // a GGUF block type, not a safetensors dtype
  CHECK(dtype_of_safetensors_name("F8_E8M0") == nullptr);
  CHECK(dtype_of_ggml_type(12)->type == DType::Q4_K);
  CHECK(dtype_of_safetensors_name("BF16")->type == DType::BF16);
  CHECK(gguf_dtype_list() ==
        "F64, F32, F16, BF16, I64, I32, I16, I8, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, NVFP4, Q5_0, Q5_1");
  CHECK(safetensors_dtype_list() == "F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2");
}

TEST_CASE("dtype table: dummy weights' types and encoders") {
  CHECK(dummy_dtype_list() == "F32, F16, BF16, F8_E4M3, Q8_0 or Q4_K");
  // Each encoder's output read back by the same row's decoder: close to what went in, within
  // the format's rounding (a loose bound: a wrong layout or scale is far off).
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (size_t i = 0; i < size_t(DType::COUNT); ++i) {
    const DTypeInfo& r = dtype_info(DType(i));
    CAPTURE(r.name);
    // A dummy type is written by its encoder, or (FP8, whose scales need a band of rows)
    // by quantize_fp8_e4m3.
    if (r.dummy) CHECK((bool(r.encode) || r.type == DType::F8_E4M3));
    if (r.encode == nullptr) continue;
    REQUIRE(bool(r.decode));
    const int64_t n = 512, blocks = n / r.block_elems;
    std::vector<float> x(n), back(n, std::nanf(""));
    float max_abs = 0;
    for (float& v : x) max_abs = std::max(max_abs, std::fabs(v = uniform(rng)));
    std::vector<uint8_t> bytes(size_t(blocks * r.block_bytes), 0xAB);
    r.encode(x.data(), bytes.data(), n);
    r.decode(bytes.data(), back.data(), blocks);
    // 4-bit formats: a step of their block's range; 8-bit: a 1/127 step; halves: 2^-8.
    const double bits = 8.0 * double(r.block_bytes) / double(r.block_elems);
    const float tolerance = (bits < 6 ? 0.35f : bits < 12 ? 0.02f : 0.01f) * max_abs;
    for (int64_t k = 0; k < n; ++k) REQUIRE(std::fabs(back[size_t(k)] - x[size_t(k)]) <= tolerance);
  }
}
