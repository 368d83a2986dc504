// quant_blocks.h — the GGUF block layouts and inline decoders of one block to f32,
// shared by the CPU matmul (fused decode) and embedding lookup.
#pragma once
#include <cstdint>

#include "engine/backend/cpu/simd.h"

namespace spark::cpu {

// Layouts as written by GGUF files (little-endian, packed, no padding).
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// Each decoder writes the block's values in order: 32 for the Q*_0/1 types, 256 for K types.
inline void decode_block(const BlockQ8_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(b.qs[i]);
}

inline void decode_block(const BlockQ4_0& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((b.qs[i] & 0x0f) - 8);
    y[i + 16] = d * static_cast<float>((b.qs[i] >> 4) - 8);
  }
}

inline void decode_block(const BlockQ4_1& b, float* y) {
  const float d = f16_to_f32(b.d);
  const float m = f16_to_f32(b.m);
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(b.qs[i] & 0x0f) + m;
    y[i + 16] = d * static_cast<float>(b.qs[i] >> 4) + m;
  }
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
    const float d1 = d * sc, m1 = dmin * m;
    k_scale_min(j + 1, b.scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    y += 64;
  }
}

inline void decode_block(const BlockQ5_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const float dmin = f16_to_f32(b.dmin);
  const uint8_t* ql = b.qs;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 8; j += 2) {
    uint8_t sc, m;
    k_scale_min(j, b.scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    k_scale_min(j + 1, b.scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l)
      y[l] = d1 * static_cast<float>((ql[l] & 0x0f) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      y[l + 32] = d2 * static_cast<float>((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
    ql += 32;
    y += 64;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

inline void decode_block(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace spark::cpu
