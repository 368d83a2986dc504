// test_cpu_kernels.cpp — CPU matmul and row decoding against scalar references on random data.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu/matmul.h"
#include "engine/backend/cpu/quant_blocks.h"
#include "engine/backend/cpu/simd.h"
#include "engine/model/quant.h"

using namespace spark;
using namespace spark::cpu;

namespace {

// The compiler's half type: ARM's __fp16 on aarch64, where g++ before 13 has no _Float16 in C++.
#if defined(__aarch64__)
using Half = __fp16;
#else
using Half = _Float16;
#endif

uint16_t to_f16(float x) {
  Half h = static_cast<Half>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  return static_cast<uint16_t>(bits >> 16);  // truncation: any bf16 value will do as input
}

// A random weight tensor of `rows` x `cols` in dtype `t`, with storage kept in `bytes`.
Tensor random_weight(DType t, int64_t rows, int64_t cols, std::mt19937& rng, std::vector<uint8_t>& bytes) {
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  std::uniform_int_distribution<int> byte(0, 255);
  const size_t nbytes = dtype_nbytes(t, rows * cols, cols);
  bytes.assign(nbytes, 0);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  // Scale fields get sane values so results stay finite and meaningful.
  const int64_t nblocks = rows * cols / dtype_block_elems(t);
  uint8_t* p = bytes.data();
  auto put16 = [](uint8_t* dst, uint16_t v) { std::memcpy(dst, &v, 2); };
  for (int64_t b = 0; b < nblocks; ++b) {
    switch (t) {
      case DType::F32: { float f = val(rng); std::memcpy(p + 4 * b, &f, 4); break; }
      case DType::F16: put16(p + 2 * b, to_f16(val(rng))); break;
      case DType::BF16: put16(p + 2 * b, to_bf16(val(rng))); break;
      case DType::Q8_0: put16(p + 34 * b, to_f16(scale(rng))); break;
      case DType::Q4_0: put16(p + 18 * b, to_f16(scale(rng))); break;
      case DType::Q4_1: put16(p + 20 * b, to_f16(scale(rng))); put16(p + 20 * b + 2, to_f16(-scale(rng) * 8)); break;
      case DType::Q4_K: case DType::Q5_K: {
        const int64_t sz = t == DType::Q4_K ? 144 : 176;
        put16(p + sz * b, to_f16(scale(rng) / 16));
        put16(p + sz * b + 2, to_f16(scale(rng) / 8));
        break;
      }
      case DType::Q6_K: put16(p + 210 * b + 208, to_f16(scale(rng) / 16)); break;
      default: FAIL("unexpected dtype");
    }
  }
  Tensor w;
  w.name = "test.weight";
  w.dtype = t;
  w.shape = {rows, cols};
  w.data = bytes.data();
  w.nbytes = nbytes;
  return w;
}

float f16v(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return cpu::f16_to_f32(h);
}

// Element i of a block, computed from the format's index formulas (not the loop order the
// kernels use), so a layout mistake in either shows up as a mismatch.
float reference_element(DType t, const uint8_t* blk, int i) {
  switch (t) {
    case DType::Q8_0: return f16v(blk) * static_cast<float>(static_cast<int8_t>(blk[2 + i]));
    case DType::Q4_0: {
      int q = i < 16 ? (blk[2 + i] & 15) : (blk[2 + i - 16] >> 4);
      return f16v(blk) * static_cast<float>(q - 8);
    }
    case DType::Q4_1: {
      int q = i < 16 ? (blk[4 + i] & 15) : (blk[4 + i - 16] >> 4);
      return f16v(blk) * static_cast<float>(q) + f16v(blk + 2);
    }
    case DType::Q4_K: case DType::Q5_K: {
      const uint8_t* scales = blk + 4;
      const int g = i / 64, hi = (i % 64) >= 32, l = i % 32, j = 2 * g + hi;
      const uint8_t* qs = blk + (t == DType::Q4_K ? 16 : 48);
      int q = hi ? (qs[32 * g + l] >> 4) : (qs[32 * g + l] & 15);
      if (t == DType::Q5_K) q += ((blk[16 + l] >> j) & 1) * 16;
      int sc, m;
      if (j < 4) {
        sc = scales[j] & 63;
        m = scales[j + 4] & 63;
      } else {
        sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
        m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
      }
      return f16v(blk) * static_cast<float>(sc) * static_cast<float>(q) - f16v(blk + 2) * static_cast<float>(m);
    }
    case DType::Q6_K: {
      const int h = i / 128, w = i % 128, qd = w / 32, l = w % 32;
      const uint8_t* ql = blk;
      const uint8_t* qh = blk + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
      int lo = ql[h * 64 + l + (qd & 1) * 32];
      lo = qd >= 2 ? lo >> 4 : lo & 15;
      int q = lo | (((qh[h * 32 + l] >> (2 * qd)) & 3) << 4);
      return f16v(blk + 208) * static_cast<float>(sc[h * 8 + l / 16 + 2 * qd]) * static_cast<float>(q - 32);
    }
    default: return NAN;
  }
}

std::vector<float> reference_row(const Tensor& w, int64_t row) {
  const int64_t cols = w.cols();
  std::vector<float> out(static_cast<size_t>(cols));
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t be = dtype_block_elems(w.dtype), bb = dtype_block_bytes(w.dtype);
  const uint8_t* r = base + row * (cols / be) * bb;
  for (int64_t i = 0; i < cols; ++i) {
    uint16_t h;
    switch (w.dtype) {
      case DType::F32: std::memcpy(&out[i], r + 4 * i, 4); break;
      case DType::F16: {
        Half v;
        std::memcpy(&v, r + 2 * i, 2);
        out[i] = static_cast<float>(v);
        break;
      }
      case DType::BF16: {
        std::memcpy(&h, r + 2 * i, 2);
        uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(&out[i], &bits, 4);
        break;
      }
      default: out[i] = reference_element(w.dtype, r + (i / be) * bb, static_cast<int>(i % be));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("cpu kernels: decode_row matches the format's index formulas for every dtype") {
  std::mt19937 rng(7);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    CAPTURE(dtype_name(t));
    std::vector<uint8_t> bytes;
    const Tensor w = random_weight(t, 3, 512, rng, bytes);
    std::vector<float> got(512);
    for (int64_t r = 0; r < 3; ++r) {
      decode_row(w, r, got.data());
      const auto want = reference_row(w, r);
      int mismatches = 0;
      for (int i = 0; i < 512; ++i) mismatches += std::fabs(got[i] - want[i]) > 1e-6f * (1 + std::fabs(want[i]));
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("cpu kernels: decode_row agrees bit for bit with the loader's dequantization") {
  // The loader's dequantize_tensor_row follows GGML's operation order; the kernels must
  // produce the same values, so the CPU backend computes on exactly the stored weights.
  std::mt19937 rng(5);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    CAPTURE(dtype_name(t));
    std::vector<uint8_t> bytes;
    const Tensor w = random_weight(t, 4, 768, rng, bytes);
    std::vector<float> got(768), want(768);
    int mismatches = 0;
    for (int64_t r = 0; r < 4; ++r) {
      decode_row(w, r, got.data());
      spark::dequantize_tensor_row(w, r, want.data());
      for (int i = 0; i < 768; ++i) mismatches += std::memcmp(&got[i], &want[i], 4) != 0;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("cpu kernels: f16 and bf16 conversions of known values") {
  CHECK(cpu::f16_to_f32(0x3c00) == 1.0f);
  CHECK(cpu::f16_to_f32(0xc000) == -2.0f);
  CHECK(cpu::f16_to_f32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(cpu::f16_to_f32(0x7bff) == 65504.0f);
  CHECK(std::isinf(cpu::f16_to_f32(0x7c00)));
  CHECK(cpu::bf16_to_f32(0x3f80) == 1.0f);
  CHECK(cpu::bf16_to_f32(0xc0a0) == -5.0f);
}

namespace {

void check_matmul_against_reference(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  ThreadPool pool(2);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    // Odd sizes exercise the tile edges; f32/f16/bf16 also get a length that is not a multiple of 8.
    const int64_t cols = k_quant ? 512 : (dtype_is_quantized(t) ? 96 : 77);
    for (int64_t out_rows : {1, 2, 37}) {
      for (int64_t rows : {1, 3, 4, 5, 8, 16}) {
        CAPTURE(dtype_name(t));
        CAPTURE(out_rows);
        CAPTURE(rows);
        std::vector<uint8_t> bytes;
        const Tensor w = random_weight(t, out_rows, cols, rng, bytes);
        std::vector<float> x(static_cast<size_t>(rows * cols));
        for (auto& v : x) v = val(rng);
        std::vector<float> y(static_cast<size_t>(rows * out_rows), NAN);
        matmul(pool, x.data(), rows, w, y.data());
        double max_rel = 0;
        for (int64_t o = 0; o < out_rows; ++o) {
          const auto wr = reference_row(w, o);
          for (int64_t r = 0; r < rows; ++r) {
            double want = 0, mag = 0;
            for (int64_t i = 0; i < cols; ++i) {
              want += static_cast<double>(wr[i]) * x[r * cols + i];
              mag += std::fabs(static_cast<double>(wr[i]) * x[r * cols + i]);
            }
            const double got = y[r * out_rows + o];
            max_rel = std::max(max_rel, std::fabs(got - want) / (mag + 1e-30));
          }
        }
        CHECK(max_rel < 1e-5);
      }
    }
  }
}

}  // namespace

TEST_CASE("cpu kernels: matmul equals a double-precision reference for every dtype and batch size") {
  check_matmul_against_reference(11);
}

TEST_CASE("cpu kernels: the portable kernels (used without AVX2, and on aarch64) equal the reference too") {
  portable_kernels_forced() = true;
  check_matmul_against_reference(12);
  portable_kernels_forced() = false;
}

TEST_CASE("cpu kernels: matmul_many equals separate matmuls, across matrix boundaries") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  ThreadPool pool(2);
  std::vector<uint8_t> b1, b2, b3;
  // Sizes that are not multiples of the chunk size put chunk edges inside matrices.
  const Tensor w1 = random_weight(DType::Q4_1, 37, 64, rng, b1);
  const Tensor w2 = random_weight(DType::Q8_0, 50, 64, rng, b2);
  const Tensor w3 = random_weight(DType::F32, 3, 64, rng, b3);
  for (int64_t rows : {1, 6}) {
    std::vector<float> x(static_cast<size_t>(rows * 64));
    for (auto& v : x) v = val(rng);
    std::vector<float> y1(static_cast<size_t>(rows * 37)), y2(static_cast<size_t>(rows * 50)),
        y3(static_cast<size_t>(rows * 3));
    std::vector<float> z1 = y1, z2 = y2, z3 = y3;
    matmul_many(pool, x.data(), rows, {{&w1, y1.data()}, {&w2, y2.data()}, {&w3, y3.data()}});
    matmul(pool, x.data(), rows, w1, z1.data());
    matmul(pool, x.data(), rows, w2, z2.data());
    matmul(pool, x.data(), rows, w3, z3.data());
    // Chunks may group output rows differently into tiles; every pair of rows has its own
    // accumulator, so the bits do not change.
    CHECK(std::memcmp(y1.data(), z1.data(), y1.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(y2.data(), z2.data(), y2.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(y3.data(), z3.data(), y3.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cpu kernels: an activation row gets the same bits alone and in any batch") {
  // Batch invariance at its root: the engine's guarantee that a sequence's output does
  // not depend on what else is in its batch needs matmul to compute each row the same way
  // whatever the number of rows (tiles of 1-4 rows, the few-rows quantized path, the
  // unpacked path for more rows).
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  ThreadPool pool(2);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1,
                  DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    CAPTURE(dtype_name(t));
    const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
    const int64_t cols = k_quant ? 512 : (dtype_is_quantized(t) ? 96 : 77), out_rows = 41, rows = 19;
    std::vector<uint8_t> bytes;
    const Tensor w = random_weight(t, out_rows, cols, rng, bytes);
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (auto& v : x) v = val(rng);
    std::vector<float> all(static_cast<size_t>(rows * out_rows));
    matmul(pool, x.data(), rows, w, all.data());
    for (int64_t first : {0, 6, 18})
      for (int64_t count : {1, 2, 3, 5, 8}) {
        if (first + count > rows) continue;
        CAPTURE(first);
        CAPTURE(count);
        std::vector<float> some(static_cast<size_t>(count * out_rows));
        matmul(pool, x.data() + first * cols, count, w, some.data());
        CHECK(std::memcmp(some.data(), all.data() + first * out_rows, some.size() * sizeof(float)) == 0);
      }
  }
}
