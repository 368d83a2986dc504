// cuda_fp16.h (emulated) — __half with exact round-to-nearest-even conversions.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "emu/vector_types.h"

namespace emu {
inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(float(man), -24);  // zero or subnormal: exact
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u |= sign;
    std::memcpy(&f, &u, 4);
    return f;
  }
  uint32_t u;
  if (exp == 31)
    u = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0u);
  else
    u = sign | (uint32_t(exp - 15 + 127) << 23) | (man << 13);
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_half_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return 0x7fffu;
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds past the largest finite half: inf
  if (a < 6.103515625e-05f) {                 // below 2^-14: subnormal, units of 2^-24
    const float q = std::nearbyint(a * 16777216.0f);  // exact scaling, RNE
    return sign | uint16_t(q);                        // q == 1024 is the smallest normal: same bits
  }
  int e;
  const float m = std::frexp(a, &e);              // a = m * 2^e, m in [0.5, 1)
  float q = std::nearbyint(m * 2048.0f);          // 11 significant bits
  if (q == 2048.0f) q = 1024.0f, ++e;
  return sign | uint16_t(((e - 1 + 15) << 10) | (uint32_t(q) - 1024u));
}
}  // namespace emu

struct __half_raw {
  unsigned short x;
};
struct __half2_raw {
  unsigned short x, y;
};

struct __half {
  unsigned short __x;
  __half() = default;
  __half(const __half_raw& r) : __x(r.x) {}
  __half(float f) : __x(emu::float_to_half_bits(f)) {}
  operator float() const { return emu::half_bits_to_float(__x); }
  operator __half_raw() const { return {__x}; }
};

struct __attribute__((aligned(4))) __half2 {
  __half x, y;
  __half2() = default;
  __half2(const __half2_raw& r) : x(__half_raw{r.x}), y(__half_raw{r.y}) {}
  __half2(__half a, __half b) : x(a), y(b) {}
};

inline float __half2float(__half h) { return emu::half_bits_to_float(h.__x); }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
