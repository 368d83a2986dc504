// test_quant.cpp — dequantization of every supported GGUF type against
// gguf.quants.dequantize, and the f16/bf16 conversions.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "engine/model/gguf.h"
#include "engine/model/quant.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::golden;
using spark::testing::golden_dir;

namespace {

// Distance in units in the last place between two floats of the same sign.
int64_t ulp_distance(float a, float b) {
  if (a == b) return 0;  // also +0 == -0
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return INT64_MAX;
  return std::llabs(static_cast<int64_t>(ia) - ib);
}

}  // namespace

TEST_CASE("quant: every GGUF type dequantizes exactly as gguf-py") {
  auto g = golden()["quant"];
  GgufFile f = GgufFile::open(golden_dir() + "/" + g["file"].get<std::string>());
  std::set<std::string> seen;
  for (const auto& ref : g["tensors"]) {
    std::string name = ref["name"].get<std::string>();
    CAPTURE(name);
    const GgufTensorInfo* t = f.find_tensor(name);
    REQUIRE(t != nullptr);
    auto bytes = spark::testing::from_hex(ref["f32_hex"].get<std::string>());
    size_t n = bytes.size() / 4;
    std::vector<float> want(n), got(n, std::numeric_limits<float>::quiet_NaN());
    std::memcpy(want.data(), bytes.data(), bytes.size());
    // Row by row, as the backends call it.
    int64_t cols = t->shape.back();
    int64_t rows = static_cast<int64_t>(n) / cols;
    size_t row_bytes = t->nbytes / static_cast<size_t>(rows);
    for (int64_t r = 0; r < rows; ++r)
      dequantize_row(t->dtype, f.tensor_data(*t) + row_bytes * r, got.data() + r * cols, cols);
    int64_t worst = 0, exact = 0;
    for (size_t i = 0; i < n; ++i) {
      int64_t d = ulp_distance(got[i], want[i]);
      worst = std::max(worst, d);
      exact += d == 0;
    }
    MESSAGE(name, " (", dtype_name(t->dtype), "): ", n, " values, ", exact, " bit-exact, worst ", worst, " ulp");
    CHECK(worst == 0);
    seen.insert(std::string(dtype_name(t->dtype)));
  }
  for (const char* type : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"})
    CHECK_MESSAGE(seen.count(type) == 1, "golden data lacks ", type);
}

TEST_CASE("quant: f16 conversion covers subnormals, infinities and NaN") {
  CHECK(f16_to_f32(0x0000) == 0.0f);
  CHECK(std::signbit(f16_to_f32(0x8000)));
  CHECK(f16_to_f32(0x3C00) == 1.0f);
  CHECK(f16_to_f32(0xC000) == -2.0f);
  CHECK(f16_to_f32(0x7BFF) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(f16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));  // largest subnormal
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));  // smallest normal
  CHECK(std::isinf(f16_to_f32(0x7C00)));
  CHECK(std::isnan(f16_to_f32(0x7E00)));
  // Every finite half against the format's definition: (-1)^s 2^(e-15) (1 + m/1024),
  // or 2^-14 m/1024 for subnormals.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) continue;
    double v = e ? std::ldexp(1.0 + m / 1024.0, static_cast<int>(e) - 15) : std::ldexp(m / 1024.0, -14);
    if (h & 0x8000) v = -v;
    REQUIRE_MESSAGE(f16_to_f32(static_cast<uint16_t>(h)) == static_cast<float>(v), "half ", h);
  }
}

TEST_CASE("quant: bf16 conversions") {
  CHECK(bf16_to_f32(0x3F80) == 1.0f);
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(f32_to_bf16(1.00390625f) == 0x3F80);  // a tie rounds to even
  CHECK(f32_to_bf16(1.01171875f) == 0x3F82);  // a tie rounds to even (up)
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}
