// block_readers.cuh — the device-side decoders of the GGUF block formats the CUDA backend
// keeps packed as the file stores them (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; layouts in
// engine/model/quant.h). Every format is read in parts of 32 consecutive values:
//
//   BlockReader<F>::kBlockValues   values in one block (32 or 256)
//   BlockReader<F>::kBlockBytes    bytes of one block (sizeof the quant.h struct)
//   BlockReader<F>::kParts         kBlockValues / 32
//   BlockReader<F>::part(block, p, w)
//       writes values [32 p, 32 p + 32) of the block starting at `block` into w[32], with
//       the arithmetic of engine/model/quant.cpp in the same order (no contraction into
//       FMA), so the values equal the CPU backend's bit for bit.
//
// All loads go through the read-only cache (__ldg) in 2- or 4-byte words: a block's
// scales are shared by the lanes that decode its parts, so they are fetched from memory
// once and served by L1 after (the emulator counts each 32-byte sector once, the same way).
//
// Reuse: a GEMV over another arrangement of matrices (an expert-indexed MoE GEMV, say)
// finds row r of a [n, k] matrix of format F at
//   data + r * block_row_bytes(F, k)          (block_formats.h)
// and value c of that row in block c / kBlockValues, part (c % kBlockValues) / 32:
//   float w[32];
//   BlockReader<F>::part(row + (c / kBlockValues) * kBlockBytes, (c % kBlockValues) / 32, w);
// block_gemv.cuh's gemv_blocks_kernel is the loop that does this for one dense matrix.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

inline constexpr int kPartValues = 32;

// 4 bytes at p through the read-only cache: one load where p is 4-byte aligned, two
// 2-byte loads where the format only guarantees 2 (Q4_0, Q6_K: 18- and 210-byte blocks).
template <int Align>
__device__ __forceinline__ uint32_t ld_word(const uint8_t* p) {
  if constexpr (Align >= 4) {
    return __ldg(reinterpret_cast<const uint32_t*>(p));
  } else {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return uint32_t(__ldg(h)) | (uint32_t(__ldg(h + 1)) << 16);
  }
}
__device__ __forceinline__ float ld_half(const uint8_t* p) {
  return __half2float(__ldg(reinterpret_cast<const __half*>(p)));
}

template <WeightFormat F>
struct BlockReader;

// Q4_0: d, then 16 bytes: value l < 16 is the low nibble of byte l, value 16 + l its high
// nibble; value = d * (q - 8).
template <>
struct BlockReader<WeightFormat::Q4_0> {
  static constexpr int kBlockValues = 32, kBlockBytes = 18, kParts = 1;
  __device__ static __forceinline__ void part(const uint8_t* b, int, float (&w)[32]) {
    const float d = ld_half(b);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld_word<2>(b + 2 + 4 * i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t byte = (q >> (8 * j)) & 0xFF;
        w[4 * i + j] = __fmul_rn(d, float(int(byte & 0x0F)) - 8.0f);
        w[16 + 4 * i + j] = __fmul_rn(d, float(int(byte >> 4)) - 8.0f);
      }
    }
  }
};

// Q4_1: d, m, then nibbles as Q4_0; value = d * q + m.
template <>
struct BlockReader<WeightFormat::Q4_1> {
  static constexpr int kBlockValues = 32, kBlockBytes = 20, kParts = 1;
  __device__ static __forceinline__ void part(const uint8_t* b, int, float (&w)[32]) {
    const float d = ld_half(b), m = ld_half(b + 2);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = ld_word<4>(b + 4 + 4 * i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t byte = (q >> (8 * j)) & 0xFF;
        w[4 * i + j] = __fadd_rn(__fmul_rn(d, float(byte & 0x0F)), m);
        w[16 + 4 * i + j] = __fadd_rn(__fmul_rn(d, float(byte >> 4)), m);
      }
    }
  }
};

// Q5_0 and Q5_1's 32 values, each 5-bit quant q (0..31) through value(q): value l < 16 is
// the low nibble of byte l of qs with bit l of the 32 fifth bits qh above it, value 16 + l
// the high nibble with bit 16 + l. Align: the words' alignment (2 for Q5_0's 22-byte blocks).
template <int Align, typename F>
__device__ __forceinline__ void q5_values(const uint8_t* qh_bytes, const uint8_t* qs, F value, float (&w)[32]) {
  const uint32_t qh = ld_word<Align>(qh_bytes);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t q = ld_word<Align>(qs + 4 * i);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t byte = (q >> (8 * j)) & 0xFF, l = 4 * i + j;
      w[l] = value((byte & 0x0F) | (((qh >> l) & 1) << 4));
      w[16 + l] = value((byte >> 4) | (((qh >> (16 + l)) & 1) << 4));
    }
  }
}

// Q5_0 (llama-quantize's fallback for Q4_K rows that are not whole 256-value blocks): d,
// 4 bytes of fifth bits, 16 bytes of nibbles; value = (q - 16) * d.
template <>
struct BlockReader<WeightFormat::Q5_0> {
  static constexpr int kBlockValues = 32, kBlockBytes = 22, kParts = 1;
  __device__ static __forceinline__ void part(const uint8_t* b, int, float (&w)[32]) {
    const float d = ld_half(b);
    q5_values<2>(b + 2, b + 6, [d](uint32_t q) { return __fmul_rn(float(q) - 16.0f, d); }, w);
  }
};

// Q5_1 (the fallback for Q5_K rows): d, m, fifth bits and nibbles as Q5_0; value = q * d + m.
template <>
struct BlockReader<WeightFormat::Q5_1> {
  static constexpr int kBlockValues = 32, kBlockBytes = 24, kParts = 1;
  __device__ static __forceinline__ void part(const uint8_t* b, int, float (&w)[32]) {
    const float d = ld_half(b), m = ld_half(b + 2);
    q5_values<4>(b + 4, b + 8, [d, m](uint32_t q) { return __fadd_rn(__fmul_rn(float(q), d), m); }, w);
  }
};

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block, from its
// 12 scale bytes (get_scale_min_k4 in GGML).
__device__ __forceinline__ void k_scale_min(const uint8_t* scales, int j, float& sc, float& m) {
  uint32_t s[3];
#pragma unroll
  for (int i = 0; i < 3; ++i) s[i] = ld_word<4>(scales + 4 * i);
  // Selects, not s[i >> 2]: an index the compiler cannot fold would leave s in local memory.
  auto byte = [&](int i) { return ((i < 4 ? s[0] : i < 8 ? s[1] : s[2]) >> (8 * (i & 3))) & 0xFF; };
  if (j < 4) {
    sc = float(byte(j) & 63);
    m = float(byte(j + 4) & 63);
  } else {
    sc = float((byte(j + 4) & 0x0F) | ((byte(j - 4) >> 6) << 4));
    m = float((byte(j + 4) >> 4) | ((byte(j) >> 6) << 4));
  }
}

// Q4_K: d, dmin, 12 scale bytes, 128 bytes of nibbles. Part p (sub-block p) is the low
// (p even) or high (p odd) nibbles of bytes [32 (p / 2), 32 (p / 2) + 32);
// value = (d * sc_p) * q - dmin * m_p.
template <>
struct BlockReader<WeightFormat::Q4_K> {
  static constexpr int kBlockValues = 256, kBlockBytes = 144, kParts = 8;
  __device__ static __forceinline__ void part(const uint8_t* b, int p, float (&w)[32]) {
    float sc, m;
    k_scale_min(b + 4, p, sc, m);
    const float d1 = __fmul_rn(ld_half(b), sc), m1 = __fmul_rn(ld_half(b + 2), m);
    const uint8_t* qs = b + 16 + 32 * (p >> 1);
    const int shift = 4 * (p & 1);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t q = ld_word<4>(qs + 4 * i) >> shift;
#pragma unroll
      for (int j = 0; j < 4; ++j) w[4 * i + j] = __fmul_rn(d1, float((q >> (8 * j)) & 0x0F)) - m1;
    }
  }
};

// Q5_K: d, dmin, 12 scale bytes, 32 bytes of fifth bits (bit p of byte l: value l of
// part p), 128 bytes of nibbles as Q4_K.
template <>
struct BlockReader<WeightFormat::Q5_K> {
  static constexpr int kBlockValues = 256, kBlockBytes = 176, kParts = 8;
  __device__ static __forceinline__ void part(const uint8_t* b, int p, float (&w)[32]) {
    float sc, m;
    k_scale_min(b + 4, p, sc, m);
    const float d1 = __fmul_rn(ld_half(b), sc), m1 = __fmul_rn(ld_half(b + 2), m);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48 + 32 * (p >> 1);
    const int shift = 4 * (p & 1);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t q = ld_word<4>(qs + 4 * i) >> shift, h = ld_word<4>(qh + 4 * i) >> p;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t v = ((q >> (8 * j)) & 0x0F) | (((h >> (8 * j)) & 1) << 4);
        w[4 * i + j] = __fmul_rn(d1, float(v)) - m1;
      }
    }
  }
};

// Q6_K: 128 bytes of low nibbles (ql), 64 bytes of high bit pairs (qh), 16 int8 scales,
// d. Each 128-value half h uses ql[64 h, 64 h + 64), qh[32 h, 32 h + 32) and scales
// [8 h, 8 h + 8); its quarter g (part p = 4 h + g) takes the low (g < 2) or high nibbles
// of ql[64 h + 32 (g & 1) + l], bits 2g, 2g + 1 of qh[32 h + l], and scale 8 h + 2 g +
// l / 16; value = (d * scale) * (q - 32).
template <>
struct BlockReader<WeightFormat::Q6_K> {
  static constexpr int kBlockValues = 256, kBlockBytes = 210, kParts = 8;
  __device__ static __forceinline__ void part(const uint8_t* b, int p, float (&w)[32]) {
    const int h = p >> 2, g = p & 3;
    const float d = ld_half(b + 208);
    const uint32_t sw = ld_word<2>(b + 192 + 8 * h + 2 * g);  // scales 2g, 2g + 1 of this half (and two more)
    const float d_lo = __fmul_rn(d, float(int8_t(sw & 0xFF))), d_hi = __fmul_rn(d, float(int8_t((sw >> 8) & 0xFF)));
    const uint8_t* ql = b + 64 * h + 32 * (g & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int lshift = 4 * (g >> 1), hshift = 2 * g;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = ld_word<2>(ql + 4 * i) >> lshift, hi = ld_word<2>(qh + 4 * i) >> hshift;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int q = int(((lo >> (8 * j)) & 0x0F) | (((hi >> (8 * j)) & 3) << 4)) - 32;
        w[4 * i + j] = __fmul_rn(i < 4 ? d_lo : d_hi, float(q));
      }
    }
  }
};

}  // namespace spark::cuda
