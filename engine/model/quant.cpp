// quant.cpp — dequantization of F16/BF16 and GGML Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4, NVFP4.
#include "engine/model/quant.h"

#include "engine/model/dtype_table.h"
#include "engine/model/fp8_weights.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "engine/util/check.h"

// The reference computes every product and difference as a separately rounded f32
// operation; a fused multiply-add would differ in the last bit.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace spark {

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t man = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalize into an f32 exponent.
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3FF) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_f32(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t n;
  std::memcpy(&n, &f, 4);
  if ((n & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((n >> 16) | 64);
  return static_cast<uint16_t>((static_cast<uint64_t>(n) + 0x7FFF + ((n >> 16) & 1)) >> 16);
}

uint16_t f32_to_f16(float f) {
  // Round to nearest even; overflow gives infinity, NaN stays a quiet NaN.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>(((x >> 16) & 0x8000) | 0x7E00);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t man = x & 0x7FFFFF;
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t h = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  uint32_t rem = man & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float e8m0_to_f32(uint8_t e) {
  if (e == 0) return 0x1p-127f;
  uint32_t bits = e == 255 ? 0x7F800000u : static_cast<uint32_t>(e) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float ue4m3_to_f32(uint8_t v) {
  const int exp = (v >> 3) & 15, man = v & 7;
  if (exp == 15 && man == 7) return 0.0f;
  return exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(float(8 + man), exp - 10);
}

void modelopt_nvfp4_row_to_blocks(const uint8_t* codes, const uint8_t* scales, int64_t cols, uint8_t* dst) {
  // Block b: the scales of sub-blocks 4b..4b+3, then for each sub-block its values j and
  // j + 8 in byte j.
  for (int64_t b = 0; b < cols / 64; ++b, dst += sizeof(BlockNVFP4))
    for (int s = 0; s < 4; ++s) {
      const int64_t sub = 4 * b + s;
      dst[s] = scales[sub];
      const uint8_t* q = codes + sub * 8;  // the sub-block's 16 values, two a byte
      const auto code = [&](int i) { return (q[i / 2] >> (4 * (i & 1))) & 0x0F; };
      for (int j = 0; j < 8; ++j) dst[4 + 8 * s + j] = static_cast<uint8_t>(code(j) | (code(j + 8) << 4));
    }
}

bool dequant_supported(DType t) { return dtype_info(t).decode != nullptr; }

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block (get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace

namespace decode {

void f32(const uint8_t* b, float* y, int64_t n) { std::memcpy(y, b, static_cast<size_t>(n) * 4); }

void f16(const uint8_t* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(load_u16(b + 2 * i));
}

void bf16(const uint8_t* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(load_u16(b + 2 * i));
}

void f8_e4m3(const uint8_t* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp8_e4m3_to_f32(b[i]);
}

void q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    float d = f16_to_f32(load_u16(b));
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
  }
}

void q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32) {
    float d = f16_to_f32(load_u16(b));
    const uint8_t* qs = b + 2;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

void q4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 20, y += 32) {
    float d = f16_to_f32(load_u16(b));
    float m = f16_to_f32(load_u16(b + 2));
    const uint8_t* qs = b + 4;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
      y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

// ggml's dequantize_row_q5_0 / _q5_1: the fifth bit of value j is bit j of qh.
void q5_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 22, y += 32) {
    const float d = f16_to_f32(load_u16(b));
    const uint32_t qh = uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24;
    const uint8_t* qs = b + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = int((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
      const int hi = int((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
      y[j] = static_cast<float>(lo) * d;
      y[j + 16] = static_cast<float>(hi) * d;
    }
  }
}

void q5_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 24, y += 32) {
    const float d = f16_to_f32(load_u16(b));
    const float m = f16_to_f32(load_u16(b + 2));
    const uint32_t qh = uint32_t(b[4]) | uint32_t(b[5]) << 8 | uint32_t(b[6]) << 16 | uint32_t(b[7]) << 24;
    const uint8_t* qs = b + 8;
    for (int j = 0; j < 16; ++j) {
      const uint32_t lo = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
      const uint32_t hi = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void q4_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 144) {
    float d = f16_to_f32(load_u16(b));
    float dmin = f16_to_f32(load_u16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int j = 0; j < 8; j += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(j, scales, sc, m);
      float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(j + 1, scales, sc, m);
      float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void q5_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 176) {
    float d = f16_to_f32(load_u16(b));
    float dmin = f16_to_f32(load_u16(b + 2));
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < 8; j += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      scale_min_k4(j, scales, sc, m);
      float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(j + 1, scales, sc, m);
      float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l)
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l)
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

void q6_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    float d = f16_to_f32(load_u16(b + 208));
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        int q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        int q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = (d * static_cast<float>(sc[is])) * static_cast<float>(q1);
        y[l + 32] = (d * static_cast<float>(sc[is + 2])) * static_cast<float>(q2);
        y[l + 64] = (d * static_cast<float>(sc[is + 4])) * static_cast<float>(q3);
        y[l + 96] = (d * static_cast<float>(sc[is + 6])) * static_cast<float>(q4);
      }
    }
  }
}

void mxfp4(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 17, y += 32) {
    const float d = e8m0_to_f32(b[0]);
    for (int j = 0; j < 16; ++j) {
      y[j] = kMxfp4Values[b[1 + j] & 0x0F] * d;
      y[j + 16] = kMxfp4Values[b[1 + j] >> 4] * d;
    }
  }
}

void nvfp4(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += sizeof(BlockNVFP4), y += 64)
    for (int s = 0; s < 4; ++s) {
      const float d = ue4m3_to_f32(b[s]);
      const uint8_t* q = b + 4 + 8 * s;
      for (int j = 0; j < 8; ++j) {
        y[16 * s + j] = kMxfp4Values[q[j] & 0x0F] * d;
        y[16 * s + j + 8] = kMxfp4Values[q[j] >> 4] * d;
      }
    }
}

}  // namespace decode

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  SPARK_CHECK(info.decode != nullptr, "no dequantization for " + std::string(info.name));
  SPARK_CHECK(n >= 0 && n % info.block_elems == 0, "row length not a whole number of blocks");
  info.decode(static_cast<const uint8_t*>(src), dst, n / info.block_elems);
}

void dequantize_tensor_row(const Tensor& t, int64_t row, float* dst) {
  SPARK_CHECK(row >= 0 && row < t.rows(), "row out of range in " + t.name);
  int64_t cols = t.cols();
  size_t row_bytes = dtype_nbytes(t.dtype, cols, cols);
  if (t.modelopt_block_scales) {  // ModelOpt's NVFP4 as the file holds it
    std::vector<uint8_t> blocks(row_bytes);
    modelopt_nvfp4_row_to_blocks(static_cast<const uint8_t*>(t.data) + row * cols / 2,
                                 t.modelopt_block_scales + row * cols / 16, cols, blocks.data());
    dequantize_row(t.dtype, blocks.data(), dst, cols);
  } else {
    dequantize_row(t.dtype, static_cast<const uint8_t*>(t.data) + row_bytes * static_cast<size_t>(row), dst, cols);
  }
  if (t.scale != nullptr) apply_tensor_scales(t, row, dst);
  else SPARK_CHECK(t.dtype != DType::F8_E4M3, "FP8 tensor " + t.name + " has no scales");
}

void apply_tensor_scales(const Tensor& t, int64_t row, float* values) {
  SPARK_CHECK(t.scale != nullptr, "tensor " + t.name + " has no scales");
  const float* s = t.scale + (row / t.scale_block_rows) * t.scale_grid_cols();
  const int64_t cols = t.cols();
  for (int64_t c = 0; c < cols; ++c) values[c] *= s[c / t.scale_block_cols];
}

std::optional<BadBlockScale> find_nonfinite_block_scale(DType t, const void* data, size_t nbytes) {
  const DTypeInfo& info = dtype_info(t);
  if (!info.scales[0].field) return std::nullopt;
  const size_t stride = size_t(info.block_bytes);
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t b = 0; b < nbytes / stride; ++b)
    for (const BlockScaleField& f : info.scales) {
      if (!f.field) break;
      const uint16_t h = load_u16(p + b * stride + f.offset);
      if ((h & 0x7C00) == 0x7C00) return BadBlockScale{int64_t(b), f.field, f16_to_f32(h)};  // all-ones exponent
    }
  return std::nullopt;
}

}  // namespace spark
