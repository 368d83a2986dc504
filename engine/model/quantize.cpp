// quantize.cpp — f32 rows into Q8_0, Q4_K and MXFP4 blocks and FP8 e4m3 with block scales
// (round to nearest on each block's range).
#include "engine/model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/model/quant.h"
#include "engine/util/check.h"

namespace spark {
namespace {

uint8_t nearest(float v, int hi) { return static_cast<uint8_t>(std::clamp(static_cast<int>(std::lround(v)), 0, hi)); }

float abs_max(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

void quantize_q8_0(const float* x, void* dst, int64_t n) {
  SPARK_CHECK(n % 32 == 0, "quantize_q8_0: length not a multiple of 32");
  auto* out = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    // llama.cpp's rule (ggml's quantize_row_q8_0_ref, gguf's Q8_0): the values are divided by
    // the f32 step before it is rounded to the stored f16, then rounded half away from zero;
    // so a model quantized here holds the bytes llama-quantize would write.
    const float amax = abs_max(x, 32);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 blk;
    blk.d = f32_to_f16(d);
    for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(std::clamp(std::round(x[i] * id), -127.0f, 127.0f));
    std::memcpy(out + b, &blk, sizeof blk);
  }
}

void quantize_mxfp4(const float* x, void* dst, int64_t n) {
  SPARK_CHECK(n % 32 == 0, "quantize_mxfp4: length not a multiple of 32");
  auto* out = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    const float amax = abs_max(x, 32);
    // An all-zero block gets e = 0, as gguf's quantizer writes it; e stays below 255 (NaN).
    const int exponent = amax > 0 ? std::clamp(std::ilogb(amax) - 2 + 127, 0, 254) : 0;
    BlockMXFP4 blk;
    blk.e = static_cast<uint8_t>(exponent);
    std::memset(blk.qs, 0, sizeof blk.qs);
    const float inv = 1.0f / e8m0_to_f32(blk.e);
    for (int i = 0; i < 32; ++i) {
      // Codes 0..7 hold 0, 0.5, 1, 1.5, 2, 3, 4, 6 (quant.h): the nearest, even on a tie.
      const float v = std::fabs(x[i]) * inv;
      uint8_t code = 0;
      for (uint8_t c = 1; c < 8; ++c) {
        const float below = kMxfp4Values[c - 1], here = kMxfp4Values[c], mid = (below + here) / 2;
        if (v > mid || (v == mid && c % 2 == 0)) code = c;
      }
      if (std::signbit(x[i]) && code != 0) code |= 8;
      blk.qs[i % 16] |= static_cast<uint8_t>(code << (i < 16 ? 0 : 4));
    }
    std::memcpy(out + b, &blk, sizeof blk);
  }
}

void quantize_q4_k(const float* x, void* dst, int64_t n) {
  SPARK_CHECK(n % 256 == 0, "quantize_q4_k: length not a multiple of 256");
  auto* out = static_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / 256; ++b, x += 256) {
    // Sub-block j's values are scale[j] * q - min[j], q in 0..15, with min[j] >= 0.
    float scale[8], min[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const float* v = x + 32 * j;
      float lo = 0.0f, hi = 0.0f;
      for (int i = 0; i < 32; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
      scale[j] = (hi - lo) / 15.0f;
      min[j] = -lo;
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, min[j]);
    }
    BlockQ4_K blk{};
    blk.d = f32_to_f16(max_scale / 63.0f);
    blk.dmin = f32_to_f16(max_min / 63.0f);
    const float d = f16_to_f32(blk.d), dmin = f16_to_f32(blk.dmin);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = d > 0 ? nearest(scale[j] / d, 63) : 0;
      m[j] = dmin > 0 ? nearest(min[j] / dmin, 63) : 0;
    }
    // The packing scale_min_k4 (quant.cpp) reads: 6 bits each for sub-blocks 0..3, and
    // sub-blocks 4..7 split into a low nibble (bytes 8..11) and two high bits (bits 6..7
    // of bytes 0..3 for scales, 4..7 for mins).
    for (int j = 0; j < 4; ++j) {
      blk.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
      blk.scales[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
      blk.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
    // Sub-blocks 2p and 2p+1 share 32 bytes: the first in the low nibbles, the second high.
    for (int j = 0; j < 8; ++j) {
      const float step = d * sc[j], offset = dmin * m[j];
      for (int i = 0; i < 32; ++i) {
        const uint8_t q = step > 0 ? nearest((x[32 * j + i] + offset) / step, 15) : 0;
        blk.qs[32 * (j / 2) + i] |= static_cast<uint8_t>(j % 2 ? q << 4 : q);
      }
    }
    std::memcpy(out + b, &blk, sizeof blk);
  }
}

uint8_t f32_to_e4m3(float x) {
  const float a = std::min(std::fabs(x), 448.0f);
  int e = 0;
  std::frexp(a, &e);                        // a in [2^(e-1), 2^e)
  const int binade = std::max(e - 1, -6);   // below 2^-6 the subnormals, spaced as the first binade
  const float quantum = std::ldexp(1.0f, binade - 3);  // 3 mantissa bits
  const float q = std::nearbyint(a / quantum);         // ties to even: the even code
  // q counts quanta of `binade`: subnormal codes are q, normal ones exponent field
  // binade + 7 and mantissa q - 8 (q = 16 is the next binade's first value, the same bits).
  const int code = a < std::ldexp(1.0f, -6) && q < 8 ? int(q) : ((binade + 7) << 3) + int(q) - 8;
  return static_cast<uint8_t>(code | (std::signbit(x) ? 0x80 : 0));
}

void quantize_fp8_e4m3(const float* x, int64_t rows, int64_t cols, int64_t block_cols, uint8_t* q, float* scales) {
  SPARK_CHECK(rows > 0 && cols > 0 && block_cols > 0, "quantize_fp8_e4m3: empty band or block");
  for (int64_t b = 0; b * block_cols < cols; ++b) {
    const int64_t c0 = b * block_cols, c1 = std::min(cols, c0 + block_cols);
    float amax = 0.0f;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
    const float scale = amax > 0 ? amax / 448.0f : 1.0f;
    scales[b] = scale;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = f32_to_e4m3(x[r * cols + c] / scale);
  }
}

}  // namespace spark
