// quant_blocks.h — portable inline decoders of one GGUF block (layouts in
// engine/model/quant.h) to f32, used by the embedding lookup and the CPU matmul's
// portable path.
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/backend/cpu/simd.h"
#include "engine/model/quant.h"

namespace spark::cpu {

// Each decoder writes the block's values in order: 32 for the Q*_0/1 types, 256 for K
// types. They work on 8 values at a time in GCC vector types (two NEON registers; on x86
// GCC extracts these byte vectors one byte at a time, so the matmul decodes with AVX2
// intrinsics there, see block_values.h); the arithmetic per value is the loader's, in the
// same order.
typedef uint8_t v8u8 __attribute__((vector_size(8)));
typedef int8_t v8i8 __attribute__((vector_size(8)));
typedef int32_t v8i32 __attribute__((vector_size(32)));

inline v8u8 load8u(const uint8_t* p) {
  v8u8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
// Through int32: GCC emits widening moves and one conversion for byte -> int32 -> float.
inline v8f to_f(const v8u8& v) { return __builtin_convertvector(__builtin_convertvector(v, v8i32), v8f); }
inline v8f to_f(const v8i8& v) { return __builtin_convertvector(__builtin_convertvector(v, v8i32), v8f); }

inline void decode_block(const BlockQ8_0& b, float* y) {
  const v8f d = splat8(f16_to_f32(b.d));
  for (int h = 0; h < 32; h += 8) {
    v8i8 q;
    std::memcpy(&q, b.qs + h, sizeof(q));
    store8(y + h, d * to_f(q));
  }
}

inline void decode_block(const BlockMXFP4& b, float* y) {
  const float d = e8m0_to_f32(b.e);
  for (int j = 0; j < 16; ++j) {
    y[j] = kMxfp4Values[b.qs[j] & 0x0f] * d;
    y[j + 16] = kMxfp4Values[b.qs[j] >> 4] * d;
  }
}

inline void decode_block(const BlockQ4_0& b, float* y) {
  const v8f d = splat8(f16_to_f32(b.d));
  const v8f eight = splat8(8.0f);
  for (int h = 0; h < 16; h += 8) {
    const v8u8 q = load8u(b.qs + h);
    store8(y + h, d * (to_f(q & 0x0f) - eight));
    store8(y + 16 + h, d * (to_f(q >> 4) - eight));
  }
}

inline void decode_block(const BlockQ4_1& b, float* y) {
  const v8f d = splat8(f16_to_f32(b.d));
  const v8f m = splat8(f16_to_f32(b.m));
  for (int h = 0; h < 16; h += 8) {
    const v8u8 q = load8u(b.qs + h);
    store8(y + h, d * to_f(q & 0x0f) + m);
    store8(y + 16 + h, d * to_f(q >> 4) + m);
  }
}

// Q5_0 / Q5_1: the nibble and, above it, bit j of qh (value j; j + 16 takes bit j + 16).
inline void q5_values(const uint8_t* qh_bytes, const uint8_t* qs, float* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<float>((qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10));
    q[j + 16] = static_cast<float>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
  }
}

inline void decode_block(const BlockQ5_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  q5_values(b.qh, b.qs, y);
  for (int j = 0; j < 32; ++j) y[j] = (y[j] - 16.0f) * d;
}

inline void decode_block(const BlockQ5_1& b, float* y) {
  const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
  q5_values(b.qh, b.qs, y);
  for (int j = 0; j < 32; ++j) y[j] = y[j] * d + m;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block.
inline void k_scale_min(int j, const uint8_t* q, uint8_t& sc, uint8_t& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

inline void decode_block(const BlockQ4_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  const uint8_t* q = b.qs;
  for (int j = 0; j < 8; j += 2) {
    uint8_t sc, m;
    k_scale_min(j, b.scales, sc, m);
    const v8f d1 = splat8(d * sc), m1 = splat8(dmin * m);
    k_scale_min(j + 1, b.scales, sc, m);
    const v8f d2 = splat8(d * sc), m2 = splat8(dmin * m);
    for (int h = 0; h < 32; h += 8) {
      const v8u8 v = load8u(q + h);
      store8(y + h, d1 * to_f(v & 0x0f) - m1);
      store8(y + 32 + h, d2 * to_f(v >> 4) - m2);
    }
    q += 32;
    y += 64;
  }
}

inline void decode_block(const BlockQ5_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  const uint8_t* ql = b.qs;
  for (int j = 0; j < 8; j += 2) {
    uint8_t sc, m;
    k_scale_min(j, b.scales, sc, m);
    const v8f d1 = splat8(d * sc), m1 = splat8(dmin * m);
    k_scale_min(j + 1, b.scales, sc, m);
    const v8f d2 = splat8(d * sc), m2 = splat8(dmin * m);
    for (int h = 0; h < 32; h += 8) {
      const v8u8 v = load8u(ql + h);
      const v8u8 hb = load8u(b.qh + h);
      // Bit j of qh[l] is the fifth bit of sub-block j's value l.
      const v8u8 lo = (v & 0x0f) | (((hb >> j) & 1) << 4);
      const v8u8 hi = (v >> 4) | (((hb >> (j + 1)) & 1) << 4);
      store8(y + h, d1 * to_f(lo) - m1);
      store8(y + 32 + h, d2 * to_f(hi) - m2);
    }
    ql += 32;
    y += 64;
  }
}

inline void decode_block(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; l += 8) {
      const int is = l / 16;
      const v8u8 a = load8u(ql + l), c = load8u(ql + l + 32), h = load8u(qh + l);
      // Six-bit values less 32, as signed bytes (range -32..31).
      const v8i8 q1 = (v8i8)((a & 0x0f) | ((h & 3) << 4)) - 32;
      const v8i8 q2 = (v8i8)((c & 0x0f) | (((h >> 2) & 3) << 4)) - 32;
      const v8i8 q3 = (v8i8)((a >> 4) | (((h >> 4) & 3) << 4)) - 32;
      const v8i8 q4 = (v8i8)((c >> 4) | (((h >> 6) & 3) << 4)) - 32;
      store8(y + l, splat8(d * static_cast<float>(sc[is])) * to_f(q1));
      store8(y + l + 32, splat8(d * static_cast<float>(sc[is + 2])) * to_f(q2));
      store8(y + l + 64, splat8(d * static_cast<float>(sc[is + 4])) * to_f(q3));
      store8(y + l + 96, splat8(d * static_cast<float>(sc[is + 6])) * to_f(q4));
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace spark::cpu
