// cuda_fp8.h (emulated) — e4m3 / e5m2 bytes and their conversions, bit-exact with CUDA:
// float -> fp8 rounds to nearest even; __NV_SATFINITE clamps to the largest finite value
// (NaN stays NaN); fp8 -> half is exact.
#pragma once
#include <cmath>
#include <cstdint>

#include "cuda_fp16.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;
enum __nv_saturation_t { __NV_NOSAT = 0, __NV_SATFINITE = 1 };
enum __nv_fp8_interpretation_t { __NV_E4M3 = 0, __NV_E5M2 = 1 };

namespace emu {
// Generic small-float encoder: `man` mantissa bits, exponent bias `bias`, largest finite
// code `max_code` (magnitude bits), NaN code `nan_code`, inf code or 0 when there is none.
inline uint8_t encode_small_float(float f, int man, int bias, uint8_t max_code, uint8_t nan_code, uint8_t inf_code,
                                  bool saturate) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return uint8_t(sign | nan_code);
  const float a = std::fabs(f);
  const float min_normal = std::ldexp(1.0f, 1 - bias);
  uint32_t code;
  if (a < min_normal) {
    code = uint32_t(std::nearbyint(std::ldexp(a, bias - 1 + man)));  // units of the smallest subnormal
  } else if (std::isinf(a)) {
    code = 0xffffu;
  } else {
    int e;
    const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    uint32_t q = uint32_t(std::nearbyint(std::ldexp(m, man + 1)));
    if (q == (2u << man)) q >>= 1, ++e;
    const int biased = e - 1 + bias;
    code = biased > 30 ? 0xffffu : (uint32_t(biased) << man) | (q - (1u << man));
  }
  if (code > max_code) {
    if (saturate) return uint8_t(sign | max_code);
    return uint8_t(sign | (inf_code ? inf_code : nan_code));
  }
  return uint8_t(sign | code);
}

inline uint8_t float_to_fp8(float f, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
  if (kind == __NV_E4M3) return encode_small_float(f, 3, 7, 0x7e, 0x7f, 0, sat == __NV_SATFINITE);
  return encode_small_float(f, 2, 15, 0x7b, 0x7f, 0x7c, sat == __NV_SATFINITE);
}

inline float fp8_to_float(uint8_t q, __nv_fp8_interpretation_t kind) {
  const bool neg = q & 0x80;
  const int man_bits = kind == __NV_E4M3 ? 3 : 2, bias = kind == __NV_E4M3 ? 7 : 15;
  const int exp = (q & 0x7f) >> man_bits, man = q & ((1 << man_bits) - 1);
  float v;
  if (kind == __NV_E4M3 && (q & 0x7f) == 0x7f) return NAN;
  if (kind == __NV_E5M2 && exp == 31) return man ? NAN : (neg ? -INFINITY : INFINITY);
  if (exp == 0)
    v = std::ldexp(float(man), 1 - bias - man_bits);
  else
    v = std::ldexp(float(man + (1 << man_bits)), exp - bias - man_bits);
  return neg ? -v : v;
}
}  // namespace emu

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float f, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
  return emu::float_to_fp8(f, sat, kind);
}
inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float2 v, __nv_saturation_t sat, __nv_fp8_interpretation_t kind) {
  return __nv_fp8x2_storage_t(emu::float_to_fp8(v.x, sat, kind) | (emu::float_to_fp8(v.y, sat, kind) << 8));
}
inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t q, __nv_fp8_interpretation_t kind) {
  return {emu::float_to_half_bits(emu::fp8_to_float(q, kind))};
}
inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t q, __nv_fp8_interpretation_t kind) {
  return {__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(q & 0xff), kind).x,
          __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(q >> 8), kind).x};
}

struct __nv_fp8_e4m3 {
  __nv_fp8_storage_t __x;
  __nv_fp8_e4m3() = default;
  explicit __nv_fp8_e4m3(float f) : __x(emu::float_to_fp8(f, __NV_SATFINITE, __NV_E4M3)) {}
  explicit operator float() const { return emu::fp8_to_float(__x, __NV_E4M3); }
};
struct __nv_fp8_e5m2 {
  __nv_fp8_storage_t __x;
  __nv_fp8_e5m2() = default;
  explicit __nv_fp8_e5m2(float f) : __x(emu::float_to_fp8(f, __NV_SATFINITE, __NV_E5M2)) {}
  explicit operator float() const { return emu::fp8_to_float(__x, __NV_E5M2); }
};
