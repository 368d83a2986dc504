// block_values.h — 32 weights at a time of a GGUF quantized block (Q8_0, Q4_0, Q4_1: the
// whole block; Q4_K, Q5_K, Q6_K: one of the super-block's 8 sub-blocks) decoded to f32 in
// four 8-wide registers, portably and with AVX2 intrinsics.
//
// Why two versions: GCC lowers the 8-byte vector types of the portable decoders to scalar
// byte extraction on x86 (shifts and inserts, one byte at a time), which made decoding the
// whole cost of a matmul. The AVX2 version widens 8 bytes with one instruction. Both give
// the loader's values: every scale * q product of these formats is exact in f32, so the
// only rounding is that of the final subtraction or addition of the offset, in either.
#pragma once
#include <cstdint>

#include "engine/backend/cpu/quant_blocks.h"
#include "engine/backend/cpu/simd.h"

#if SPARK_X86_AVX2
#include <immintrin.h>
#endif

namespace spark::cpu {

// 32-weight sub-blocks per block: the K types' super-blocks hold 8.
template <typename Block>
constexpr int kSubBlocks = 1;
template <>
constexpr int kSubBlocks<BlockQ4_K> = 8;
template <>
constexpr int kSubBlocks<BlockQ5_K> = 8;
template <>
constexpr int kSubBlocks<BlockQ6_K> = 8;

// Decodes the whole block once (the shared scalar-vector decoders) and hands out its
// sub-blocks; callers ask for a block's sub-blocks one after another.
struct PortableBlocks {
  const void* cached = nullptr;
  alignas(32) float values[256] = {};

  template <typename Block>
  void decode(const Block& b, int sub, v8f w[4]) {
    if (cached != &b) {
      decode_block(b, values);
      cached = &b;
    }
    for (int k = 0; k < 4; ++k) w[k] = load8(values + 32 * sub + 8 * k);
  }
};

#if SPARK_X86_AVX2
struct Avx2Blocks {
  SPARK_AVX2 static inline __m256 splat(float v) { return _mm256_set1_ps(v); }
  SPARK_AVX2 static inline __m256 splat_f16(uint16_t h) {
    return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
  }
  SPARK_AVX2 static inline __m256 widen(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); }
  SPARK_AVX2 static inline __m128i load16(const void* p) {
    return _mm_loadu_si128(static_cast<const __m128i*>(p));
  }
  // The four 8-value groups of 32 signed byte values held in two 16-byte registers.
  SPARK_AVX2 static inline void widen32(__m128i a, __m128i b, __m256 q[4]) {
    q[0] = widen(a);
    q[1] = widen(_mm_unpackhi_epi64(a, a));
    q[2] = widen(b);
    q[3] = widen(_mm_unpackhi_epi64(b, b));
  }
  // Low (shift 0) or high (shift 4) nibbles of 16 bytes.
  SPARK_AVX2 static inline __m128i nibbles(__m128i v, int shift) {
    return _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm_set1_epi8(0x0f));
  }
  // Bits [shift, shift + width) of 16 bytes, moved to bit `to`.
  SPARK_AVX2 static inline __m128i bits(__m128i v, int shift, int width, int to) {
    const __m128i field = _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                                        _mm_set1_epi8(static_cast<char>((1 << width) - 1)));
    return _mm_sll_epi16(field, _mm_cvtsi32_si128(to));  // fields are < 2^(8 - to): no carry across bytes
  }

  SPARK_AVX2 static inline void decode(const BlockQ8_0& b, int, v8f w[4]) {
    const __m256 d = splat_f16(b.d);
    for (int k = 0; k < 4; ++k)
      w[k] = (v8f)_mm256_mul_ps(d, widen(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * k))));
  }
  // Value i of a Q4_0 / Q4_1 block is the low nibble of byte i for i < 16, the high
  // nibble of byte i - 16 after that: bytes widened to 32 bits straight from memory, then
  // masked or shifted (fewer instructions than splitting the nibbles as bytes).
  SPARK_AVX2 static inline void q4_values(const uint8_t* qs, __m256i q[4]) {
    const __m256i mask = _mm256_set1_epi32(0x0f);
    const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
    q[0] = _mm256_and_si256(a, mask);
    q[1] = _mm256_and_si256(c, mask);
    q[2] = _mm256_srli_epi32(a, 4);
    q[3] = _mm256_srli_epi32(c, 4);
  }
  SPARK_AVX2 static inline void decode(const BlockQ4_0& b, int, v8f w[4]) {
    const __m256 d = splat_f16(b.d);
    __m256i q[4];
    q4_values(b.qs, q);
    for (int k = 0; k < 4; ++k)
      w[k] = (v8f)_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(q[k], _mm256_set1_epi32(8))));
  }
  SPARK_AVX2 static inline void decode(const BlockQ4_1& b, int, v8f w[4]) {
    const __m256 d = splat_f16(b.d), m = splat_f16(b.m);
    __m256i q[4];
    q4_values(b.qs, q);
    for (int k = 0; k < 4; ++k) w[k] = (v8f)_mm256_fmadd_ps(d, _mm256_cvtepi32_ps(q[k]), m);
  }
  // Q4_K / Q5_K sub-block j: the low (j even) or high nibbles of the pair's 32 bytes, with
  // Q5_K's fifth bits (`fifth`, zero for Q4_K) above them, scaled by d * sc_j, less
  // dmin * m_j.
  template <typename Block>
  SPARK_AVX2 static inline void decode_k(const Block& b, int j, __m128i fifth_lo, __m128i fifth_hi, v8f w[4]) {
    uint8_t sc, mn;
    k_scale_min(j, b.scales, sc, mn);
    const __m256 d = splat(f16_to_f32(b.d) * sc), m = splat(f16_to_f32(b.dmin) * mn);
    const uint8_t* q = b.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    __m256 v[4];
    widen32(_mm_or_si128(nibbles(load16(q), shift), fifth_lo), _mm_or_si128(nibbles(load16(q + 16), shift), fifth_hi),
            v);
    for (int k = 0; k < 4; ++k) w[k] = (v8f)_mm256_fmsub_ps(d, v[k], m);
  }
  SPARK_AVX2 static inline void decode(const BlockQ4_K& b, int j, v8f w[4]) {
    decode_k(b, j, _mm_setzero_si128(), _mm_setzero_si128(), w);
  }
  // Bit j of qh[l] is the fifth bit of value l.
  SPARK_AVX2 static inline void decode(const BlockQ5_K& b, int j, v8f w[4]) {
    decode_k(b, j, bits(load16(b.qh), j, 1, 4), bits(load16(b.qh + 16), j, 1, 4), w);
  }
  // Q6_K sub-block s: half h = s / 4 (128 values), part p = s % 4 within it. Value l of
  // the part is a nibble of ql (low for p < 2, of byte l + 32 for odd p) with bits
  // [2p, 2p + 2) of qh[l] above it, less 32; values 0-15 and 16-31 have their own scale.
  SPARK_AVX2 static inline void decode(const BlockQ6_K& b, int s, v8f w[4]) {
    const int h = s / 4, p = s % 4;
    const uint8_t* ql = b.ql + 64 * h + 32 * (p % 2);
    const uint8_t* qh = b.qh + 32 * h;
    const int8_t* sc = b.scales + 8 * h + 2 * p;
    const float d = f16_to_f32(b.d);
    const int shift = 4 * (p / 2);
    const __m128i bias = _mm_set1_epi8(32);
    const __m128i a = _mm_sub_epi8(_mm_or_si128(nibbles(load16(ql), shift), bits(load16(qh), 2 * p, 2, 4)), bias);
    const __m128i c =
        _mm_sub_epi8(_mm_or_si128(nibbles(load16(ql + 16), shift), bits(load16(qh + 16), 2 * p, 2, 4)), bias);
    __m256 v[4];
    widen32(a, c, v);
    const __m256 d0 = splat(d * static_cast<float>(sc[0])), d1 = splat(d * static_cast<float>(sc[1]));
    w[0] = (v8f)_mm256_mul_ps(d0, v[0]);
    w[1] = (v8f)_mm256_mul_ps(d0, v[1]);
    w[2] = (v8f)_mm256_mul_ps(d1, v[2]);
    w[3] = (v8f)_mm256_mul_ps(d1, v[3]);
  }
};
#endif

}  // namespace spark::cpu
