// test_quant.cpp — dequantization of every supported GGUF type against
// gguf.quants.dequantize, the f16/bf16 conversions, and the Q8_0/Q4_K/MXFP4/e4m3
// quantizers of dummy weights.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "engine/model/fp8_weights.h"
#include "engine/model/gguf.h"
#include "engine/model/quant.h"
#include "engine/model/quantize.h"
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
  for (const char* type : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "MXFP4"})
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

TEST_CASE("quant: f32 to f16 rounds to nearest even, subnormals included") {
  // Every finite half comes back exactly, and the midpoint between two neighbours goes
  // to the one with an even mantissa.
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float v = f16_to_f32(static_cast<uint16_t>(h));
    REQUIRE_MESSAGE(f32_to_f16(v) == h, "half ", h);
    REQUIRE(f32_to_f16(-v) == (h | 0x8000));
    if (h + 1 < 0x7C00) {
      const float mid = static_cast<float>((double(v) + f16_to_f32(static_cast<uint16_t>(h + 1))) / 2);
      REQUIRE_MESSAGE(f32_to_f16(mid) == ((h & 1) ? h + 1 : h), "midpoint above half ", h);
    }
  }
  CHECK(f32_to_f16(65520.0f) == 0x7C00);  // past the largest half's rounding range
  CHECK(f32_to_f16(std::ldexp(1.0f, -26)) == 0x0000);
  CHECK(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST_CASE("quant: Q8_0 and Q4_K quantization round-trips within each block's step") {
  std::vector<float> x(1024);
  uint64_t state = 12345;
  for (size_t i = 0; i < x.size(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const float u = float(state >> 40) / 16777216.0f;
    x[i] = (i / 256 == 2) ? 0.5f + u : 2.0f * u - 1.0f;  // block 2 has no negative value
  }
  x[300] = 0.0f;
  std::fill(x.begin() + 768, x.begin() + 800, 0.0f);  // an all-zero sub-block

  std::vector<uint8_t> q8(x.size() / 32 * sizeof(BlockQ8_0));
  quantize_q8_0(x.data(), q8.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(DType::Q8_0, q8.data(), y.data(), int64_t(x.size()));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    // Half a step, and the step's rounding to f16 (2^-11 of it) times up to 127: llama.cpp's
    // rule rounds the values to the f32 step, then stores the step as f16.
    for (size_t i = 0; i < 32; ++i) REQUIRE(std::fabs(y[32 * b + i] - x[32 * b + i]) <= amax / 127 * 0.563f + 1e-7f);
  }

  std::vector<uint8_t> q4(x.size() / 256 * sizeof(BlockQ4_K));
  quantize_q4_k(x.data(), q4.data(), int64_t(x.size()));
  dequantize_row(DType::Q4_K, q4.data(), y.data(), int64_t(x.size()));
  for (size_t b = 0; b < x.size() / 256; ++b) {
    // The 6-bit scales and mins cost up to half a step of d and dmin each, times q <= 15.
    float max_range = 0, max_neg = 0;
    for (size_t j = 0; j < 8; ++j) {
      float lo = 0, hi = 0;
      for (size_t i = 0; i < 32; ++i) lo = std::min(lo, x[256 * b + 32 * j + i]), hi = std::max(hi, x[256 * b + 32 * j + i]);
      max_range = std::max(max_range, hi - lo);
      max_neg = std::max(max_neg, -lo);
    }
    const float d = max_range / 15 / 63, dmin = max_neg / 63;
    for (size_t j = 0; j < 8; ++j) {
      float lo = 0, hi = 0;
      for (size_t i = 0; i < 32; ++i) lo = std::min(lo, x[256 * b + 32 * j + i]), hi = std::max(hi, x[256 * b + 32 * j + i]);
      const float bound = (hi - lo) / 15 / 2 + 8 * d + dmin;
      for (size_t i = 0; i < 32; ++i) {
        const size_t k = 256 * b + 32 * j + i;
        REQUIRE_MESSAGE(std::fabs(y[k] - x[k]) <= bound, "element ", k, ": ", x[k], " -> ", y[k]);
      }
    }
  }
  for (size_t k = 768; k < 800; ++k) CHECK(y[k] == 0.0f);
}

TEST_CASE("quant: MXFP4 quantization writes gguf's bytes, each value the nearest code under the block's scale") {
  // gguf.quants.quantize's blocks of the golden source values (random normals, an all-zero
  // block, a block scaled by 1e-3): no value lies on a tie, so any nearest-code rule agrees.
  const auto& g = golden()["quant"]["mxfp4_source"];
  GgufFile f = GgufFile::open(golden_dir() + "/" + golden()["quant"]["file"].get<std::string>());
  const GgufTensorInfo* t = f.find_tensor(g["name"].get<std::string>());
  REQUIRE(t != nullptr);
  REQUIRE(t->dtype == DType::MXFP4);
  const auto source = spark::testing::from_hex(g["f32_hex"].get<std::string>());
  std::vector<float> x(source.size() / 4);
  std::memcpy(x.data(), source.data(), source.size());
  REQUIRE(x.size() / 32 * sizeof(BlockMXFP4) == t->nbytes);
  std::vector<uint8_t> got(t->nbytes);
  quantize_mxfp4(x.data(), got.data(), int64_t(x.size()));
  const uint8_t* want = f.tensor_data(*t);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    CAPTURE(b);
    CHECK(std::memcmp(got.data() + b * 17, want + b * 17, 17) == 0);
  }

  // Ties go to the even code, values beyond 6 saturate, zero keeps its code whatever its sign.
  float y[32] = {};
  y[0] = 6.0f;  // max 6: scale 2^(2 - 2) = 1
  y[1] = 2.5f;  // between 2 (code 4) and 3 (code 5): 4
  y[2] = 5.0f;  // between 4 (code 6) and 6 (code 7): 6
  y[3] = -0.25f;  // between 0 and 0.5: code 0, and no sign
  y[4] = -1.25f;  // between 1 (code 2) and 1.5 (code 3): -1
  y[5] = 7.9f;  // max|x| < 8 keeps the scale at 1: saturates to 6
  BlockMXFP4 blk;
  quantize_mxfp4(y, &blk, 32);
  CHECK(int(blk.e) == 127);
  auto code = [&blk](int i) { return (blk.qs[i % 16] >> (i < 16 ? 0 : 4)) & 15; };
  CHECK(code(0) == 7);
  CHECK(code(1) == 4);
  CHECK(code(2) == 6);
  CHECK(code(3) == 0);
  CHECK(code(4) == (2 | 8));
  CHECK(code(5) == 7);
  for (int i = 6; i < 32; ++i) CHECK(code(i) == 0);
}

TEST_CASE("quant: f32 to e4m3 takes the nearest code, ties to the even one, saturating at 448") {
  for (int c = 0; c < 0x7F; ++c) {  // every finite code, both signs
    const float v = fp8_e4m3_to_f32(uint8_t(c));
    REQUIRE(f32_to_e4m3(v) == c);
    REQUIRE(f32_to_e4m3(-v) == (c | 0x80));
    if (c + 1 < 0x7F) {
      const float next = fp8_e4m3_to_f32(uint8_t(c + 1)), mid = (v + next) / 2;
      REQUIRE(f32_to_e4m3(mid) == (c % 2 ? c + 1 : c));
      REQUIRE(f32_to_e4m3(std::nextafter(mid, 0.0f)) == c);
      REQUIRE(f32_to_e4m3(std::nextafter(mid, 1e9f)) == c + 1);
    }
  }
  CHECK(f32_to_e4m3(500.0f) == 0x7E);
  CHECK(f32_to_e4m3(-1e30f) == 0xFE);
  CHECK(f32_to_e4m3(std::ldexp(1.0f, -10)) == 0x00);  // half the least subnormal: to the even code, zero

  // A band of 3 rows in blocks of 16 columns (the last block 8 wide): each block's scale
  // maps its max |x| to 448, and every value comes back within half a step of its code.
  const int64_t rows = 3, cols = 40, block = 16;
  std::vector<float> x(size_t(rows * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.7f) * float(1 + i % 5);
  for (int64_t r = 0; r < rows; ++r) std::fill(x.begin() + r * cols + 16, x.begin() + r * cols + 32, 0.0f);
  std::vector<uint8_t> q(x.size());
  std::vector<float> scales(3);
  quantize_fp8_e4m3(x.data(), rows, cols, block, q.data(), scales.data());
  CHECK(scales[1] == 1.0f);  // an all-zero block
  for (int64_t b = 0; b < 3; ++b) {
    float amax = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = b * block; c < std::min(cols, (b + 1) * block); ++c) amax = std::max(amax, std::fabs(x[size_t(r * cols + c)]));
    if (amax > 0) CHECK(scales[size_t(b)] == amax / 448.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = b * block; c < std::min(cols, (b + 1) * block); ++c) {
        const float v = x[size_t(r * cols + c)], got = fp8_e4m3_to_f32(q[size_t(r * cols + c)]) * scales[size_t(b)];
        REQUIRE(std::fabs(got - v) <= std::fabs(v) / 16 + scales[size_t(b)] * std::ldexp(1.0f, -10));
      }
  }
}

