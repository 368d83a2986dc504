// block_values.h — one Q8_0 / Q4_0 / Q4_1 block decoded to its 32 f32 weights in four
// 8-wide registers, portably and with AVX2 intrinsics.
//
// Why two versions: GCC lowers the 8-byte vector types of the portable decoders to scalar
// byte extraction on x86 (shifts and inserts, one byte at a time), which made decoding the
// whole cost of a decode step. The AVX2 version widens 8 bytes with one instruction. Both
// compute the loader's values (d q, or d q + m), which are exact in f32 for d q.
#pragma once
#include <cstdint>

#include "engine/backend/cpu/quant_blocks.h"
#include "engine/backend/cpu/simd.h"

#if SPARK_X86_AVX2
#include <immintrin.h>
#endif

namespace spark::cpu {

struct PortableBlocks {
  template <typename Block>
  static void decode(const Block& b, v8f w[4]) {
    alignas(32) float values[32];
    decode_block(b, values);
    for (int k = 0; k < 4; ++k) w[k] = load8(values + 8 * k);
  }
};

#if SPARK_X86_AVX2
struct Avx2Blocks {
  SPARK_AVX2 static inline __m256 splat_f16(uint16_t h) {
    return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
  }
  SPARK_AVX2 static inline __m256 widen(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); }
  // Value i of a Q4 block is the low nibble of byte i for i < 16, the high nibble of byte
  // i - 16 after that; each nibble comes back as a signed byte less `bias`.
  SPARK_AVX2 static inline void nibbles(const uint8_t* qs, int bias, __m256 q[4]) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i mask = _mm_set1_epi8(0x0f), b = _mm_set1_epi8(static_cast<char>(bias));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, mask), b);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), mask), b);
    q[0] = widen(lo);
    q[1] = widen(_mm_unpackhi_epi64(lo, lo));
    q[2] = widen(hi);
    q[3] = widen(_mm_unpackhi_epi64(hi, hi));
  }

  SPARK_AVX2 static inline void decode(const BlockQ8_0& b, v8f w[4]) {
    const __m256 d = splat_f16(b.d);
    for (int k = 0; k < 4; ++k)
      w[k] = (v8f)_mm256_mul_ps(d, widen(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * k))));
  }
  SPARK_AVX2 static inline void decode(const BlockQ4_0& b, v8f w[4]) {
    const __m256 d = splat_f16(b.d);
    __m256 q[4];
    nibbles(b.qs, 8, q);
    for (int k = 0; k < 4; ++k) w[k] = (v8f)_mm256_mul_ps(d, q[k]);
  }
  SPARK_AVX2 static inline void decode(const BlockQ4_1& b, v8f w[4]) {
    const __m256 d = splat_f16(b.d), m = splat_f16(b.m);
    __m256 q[4];
    nibbles(b.qs, 0, q);
    for (int k = 0; k < 4; ++k) w[k] = (v8f)_mm256_fmadd_ps(d, q[k], m);
  }
};
#endif

}  // namespace spark::cpu
