// simd.h — the portable 8-wide float vector the CPU kernels are written in, and the
// attribute that builds an AVX2/FMA clone of a hot function next to the portable one.
#pragma once
#include <cstdint>
#include <cstring>

// Passing 32-byte vectors between the portable and the AVX2 clone is internal to this
// library, so the ABI note GCC prints about it does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace spark::cpu {

// GCC lowers this type to one AVX register, two SSE or NEON registers, or scalars,
// so one source serves x86-64 and aarch64 alike.
typedef float v8f __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store8(float* p, const v8f& v) { std::memcpy(p, &v, sizeof(v)); }
inline v8f splat8(float x) { return v8f{x, x, x, x, x, x, x, x}; }
inline float hsum8(const v8f& v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// The build uses no -march flag; on x86-64 the loader picks the AVX2/FMA clone at run time
// when the CPU has it. aarch64 always has NEON, which the default build already uses.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPARK_KERNEL __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define SPARK_KERNEL
#endif

// Tests set this to check the portable kernels on a machine that has AVX2.
inline bool& portable_kernels_forced() {
  static bool forced = false;
  return forced;
}

// Kernels written with AVX2 intrinsics, where GCC's lowering of the portable types is
// poor; callers check cpu_has_avx2() at run time and fall back to the portable kernel.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPARK_X86_AVX2 1
#define SPARK_AVX2 __attribute__((target("avx2,fma,f16c")))
inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has && !portable_kernels_forced();
}
#else
#define SPARK_X86_AVX2 0
inline bool cpu_has_avx2() { return false; }
#endif

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline float f16_to_f32(uint16_t h) {
#if defined(__aarch64__)
  // ARM's own half type (one fcvt); g++ before 13 has no _Float16 in C++ on aarch64.
  __fp16 v;
  std::memcpy(&v, &h, sizeof(v));
  return static_cast<float>(v);
#elif defined(__FLT16_MAX__)
  _Float16 v;
  std::memcpy(&v, &h, sizeof(v));
  return static_cast<float>(v);
#else
  // IEEE half -> single by hand where the compiler has no _Float16.
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | ((112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
#endif
}

}  // namespace spark::cpu
