// weight_readers.cuh — device-side readers of weight rows, one per WeightFormat
// (kernel_args.h), so that a kernel takes the format as a template parameter and is
// written once. A reader covers a stack of matrices of the same shape (the experts of a
// layer): row r of the stack is row r % n of matrix r / n, so a kernel addresses expert
// e's row i as e * n + i.
//
// The interface a kernel uses:
//   kValues            weights per chunk: the unit of one load (a 16-byte vector);
//   Chunk load(r, c)   requests the raw chunk of row r starting at column c (c a multiple
//                      of kValues); weights are read once, so loads bypass L1;
//   decode(q, r, c, w) turns it into kValues f32 weights (the per-block scales, small
//                      and shared by neighbouring lanes, come through the cached path);
//   at(r, c)           the address of the chunk's bytes (for prefetches; a pointer
//                      chunk's load returns the same).
// Splitting load from decode lets a kernel request the next chunk before it multiplies the
// current one. A GEMV that sums each chunk's products on its own may instead call
// decode_folded (below): the chunk's weights without a factor common to all of them, and
// that factor, which then multiplies the chunk's dot product once a row (MXFP4's
// power-of-two scale: one multiply a weight fewer). The GGUF block formats kept as the
// file's blocks (Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) come through BlockRows over their decoders
// (block_readers.cuh): a chunk is one 32-value part of a block. FP8 (Fp8Rows) applies the
// scale of the block a value falls in, each matrix of a stack with its own scale grid.
// MXFP4 (Mxfp4Rows) decodes a block's 32 E2M1 codes with its power-of-two scale; NVFP4
// (Nvfp4Rows) half a block's 64 with their E4M3 scales and the row's scale.
#pragma once
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/block_readers.cuh"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"

#include <concepts>

namespace spark::cuda {

// [rows, k] of the compute type T (bf16 or f16).
template <typename T>
struct HalfRows {
  static constexpr int kValues = 8;
  using Chunk = uint4;
  const T* w;
  int64_t k;
  __device__ __forceinline__ const T* at(int64_t r, int c) const { return w + r * k + c; }
  __device__ __forceinline__ Chunk load(int64_t r, int c) const { return ld_global_nc_na_v4(at(r, c)); }
  __device__ __forceinline__ void decode(const Chunk& q, int64_t, int, float (&out)[kValues]) const {
    const T* v = reinterpret_cast<const T*>(&q);
#pragma unroll
    for (int i = 0; i < kValues; ++i) out[i] = to_f32(v[i]);
  }
};

// Four int8 values (one word, little-endian) as exact f32 through code_to_f32 (each byte
// offset by 128): a byte move and an add a value where I2F would run at 16 a clock an SM on
// sm_90. A batch-1 Q8_0 GEMV at H100's 3.35 TB/s needs 3.35e12 conversions a second, 80% of
// the 132 SMs' 4.2e12 I2F; now ~20% of their integer pipe. The SASS has ~10% more
// instructions (make kernel-report, sm_121: 760 -> 840 for the BF16 decode GEMV, 32 I2F -> 0).
__device__ __forceinline__ void int8x4_to_f32(uint32_t w, float* out) {
  const uint32_t u = w ^ 0x80808080u;
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = code_to_f32<128>((u >> (8 * i)) & 0xFFu);
}

// Q8_0 as DeviceMatrix packs it: int8 quants [rows, k], one f16 scale per 32.
struct Q8_0Rows {
  static constexpr int kValues = 16;
  using Chunk = uint4;
  const int8_t* qs;
  const f16* scales;
  int64_t k;
  __device__ __forceinline__ const int8_t* at(int64_t r, int c) const { return qs + r * k + c; }
  __device__ __forceinline__ Chunk load(int64_t r, int c) const { return ld_global_nc_na_v4(at(r, c)); }
  __device__ __forceinline__ void decode(const Chunk& q, int64_t r, int c, float (&out)[kValues]) const {
    const float d = to_f32(__ldg(scales + r * (k / 32) + c / 32));
    int8x4_to_f32(q.x, out);
    int8x4_to_f32(q.y, out + 4);
    int8x4_to_f32(q.z, out + 8);
    int8x4_to_f32(q.w, out + 12);
#pragma unroll
    for (int i = 0; i < kValues; ++i) out[i] *= d;
  }
};

// A raw-block format: row r is row_bytes of blocks from data + r * row_bytes; the chunk
// at column c is part (c % kBlockValues) / 32 of block c / kBlockValues, decoded by
// BlockReader<F>::part through the read-only cache (its "load" only finds the block).
template <WeightFormat F>
struct BlockRows {
  using Reader = BlockReader<F>;
  static constexpr int kValues = kPartValues;
  using Chunk = const uint8_t*;
  const uint8_t* data;
  int64_t row_bytes;
  __device__ __forceinline__ Chunk load(int64_t r, int c) const {
    return data + r * row_bytes + int64_t(c / Reader::kBlockValues) * Reader::kBlockBytes;
  }
  __device__ __forceinline__ Chunk at(int64_t r, int c) const { return load(r, c); }
  __device__ __forceinline__ void decode(const Chunk& b, int64_t, int c, float (&out)[kValues]) const {
    // Unsigned, so that the compiler knows the part is 0 .. kParts - 1.
    Reader::part(b, int((unsigned(c) % Reader::kBlockValues) / kPartValues), out);
  }
};

// FP8 as DeviceWeights keeps it (kernel_args.h): e4m3 bytes [rows, k], and the f32 scale
// grid of each matrix of the stack after the previous one's (grid_size scales each).
// Value (r, c) of matrix m = r / matrix_rows is e4m3 * the scale of the block (r %
// matrix_rows, c) falls in, in f32 as the CPU backend computes it. 16 values a chunk
// never straddle a scale block (block_cols is a multiple of 16 or covers all k).
struct Fp8Rows {
  static constexpr int kValues = 16;
  using Chunk = uint4;
  const uint8_t* q;
  const float* scales;
  int64_t k;
  int32_t matrix_rows, block_rows, block_cols, grid_cols, grid_size;
  __device__ __forceinline__ const uint8_t* at(int64_t r, int c) const { return q + r * k + c; }
  __device__ __forceinline__ Chunk load(int64_t r, int c) const { return ld_global_nc_na_v4(at(r, c)); }
  __device__ __forceinline__ void decode(const Chunk& raw, int64_t r, int c, float (&out)[kValues]) const {
    const int64_t m = r / matrix_rows;
    const int i = int(r - m * matrix_rows);
    const float s = __ldg(scales + m * grid_size + (i / block_rows) * grid_cols + c / block_cols);
    const uint8_t* v = reinterpret_cast<const uint8_t*>(&raw);
#pragma unroll
    for (int j = 0; j < kValues; ++j) out[j] = fp8_decode(v[j], s);
  }
};

// 2^(e - 127) as engine/model/quant.cpp's e8m0_to_f32 gives it (e = 0 subnormal, 255 inf).
__device__ __forceinline__ float e8m0_decode(uint32_t e) {
  return __uint_as_float(e == 0 ? 0x00400000u : e == 255 ? 0x7F800000u : e << 23);
}
// The eight E2M1 codes of a 32-bit word (byte i: code lo[i] in its low nibble, hi[i] in
// its high one; E2M1 is a sign, 2 exponent bits and 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3,
// 4, 6 and their negatives) times d, where d14 = d x 2^14. Each code is moved into an f16
// as it stands: its sign to bit 15, its exponent and mantissa bits to bits 11-9, the low
// bits of the f16's exponent and the top of its mantissa, which makes the f16 e2m1 x 2^-14
// (code 1, 0.5, lands on the subnormal 2^-15; code 0 on zero). Two codes a 32-bit
// operation: the pairs (byte 0, byte 2) and (byte 1, byte 3) sit 16 bits apart, so one
// shift and one masked merge place both halves of an f16 pair; the pair's conversion to
// f32 finishes it, exact (e2m1 has 2 significant bits): e2m1_word_2m14 gives e2m1 x 2^-14,
// e2m1_word multiplies by d14 too (exact). 4 instructions a code with the multiply, where
// building f32 bits with selects took ~11 (make kernel-report's "instructions a weight",
// load, addressing and the GEMV's FMA included: MXFP4 12.7 -> 4.5 on sm_121); without the
// multiply, which decode_folded leaves to the chunk's dot product, 3.5.
__device__ __forceinline__ void e2m1_word_2m14(uint32_t w, float* lo, float* hi) {
  constexpr uint32_t kMag = 0x0E000E00u, kSign = 0x80008000u;
  const uint32_t pairs[4] = {
      ((w << 9) & kMag) | ((w << 12) & kSign),  // low nibbles of bytes 0 and 2
      ((w << 1) & kMag) | ((w << 4) & kSign),   // low nibbles of bytes 1 and 3
      ((w << 5) & kMag) | ((w << 8) & kSign),   // high nibbles of bytes 0 and 2
      ((w >> 3) & kMag) | (w & kSign),          // high nibbles of bytes 1 and 3
  };
  float2 f[4];
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    __half2 h;
    memcpy(&h, &pairs[p], 4);  // the bits as they are: no repacking of the halves
    f[p] = __half22float2(h);
  }
  lo[0] = f[0].x, lo[2] = f[0].y, lo[1] = f[1].x, lo[3] = f[1].y;
  hi[0] = f[2].x, hi[2] = f[2].y, hi[1] = f[3].x, hi[3] = f[3].y;
}
__device__ __forceinline__ void e2m1_word(uint32_t w, float d14, float* lo, float* hi) {
  e2m1_word_2m14(w, lo, hi);
#pragma unroll
  for (int i = 0; i < 4; ++i) lo[i] = __fmul_rn(lo[i], d14), hi[i] = __fmul_rn(hi[i], d14);
}

// MXFP4 as DeviceWeights keeps it (kernel_args.h): a chunk is one block, its 16 code bytes
// (a warp: 512 contiguous bytes, as Q8_0's int8), its E8M0 scale one byte through the
// read-only cache; value = e2m1 * scale in f32, as the CPU backend multiplies it. The
// scale times 2^14 (e2m1_word) is 2^(e - 113) for e <= 240 (e = 0, 2^-127, included);
// the upload refuses 241..254 (weights of 2^114 and more), and 255 is infinite as on the CPU.
// decode_2m14 gives e2m1 x 2^-14 and returns that d14: a power of two, so a dot product
// of those times d14 is the dot product of the scaled weights, bit for bit (unless it
// leaves f32's normal range); a block of scale 255 gives inf or NaN as on the CPU, though
// not always the same one (the CPU's 0 x inf weights are NaN, here a zero dot product is).
struct Mxfp4Rows {
  static constexpr int kValues = 32;
  using Chunk = uint4;
  const uint8_t* codes;
  const uint8_t* scales;
  int64_t k;
  __device__ __forceinline__ const uint8_t* at(int64_t r, int c) const { return codes + (r * k + c) / 2; }
  __device__ __forceinline__ Chunk load(int64_t r, int c) const { return ld_global_nc_na_v4(at(r, c)); }
  __device__ __forceinline__ float decode_2m14(const Chunk& q, int64_t r, int c, float (&out)[kValues]) const {
    const uint32_t e = __ldg(scales + (r * k + c) / 32);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) e2m1_word_2m14(words[i], out + 4 * i, out + 16 + 4 * i);
    return __uint_as_float(e <= 240 ? (e + 14) << 23 : 0x7F800000u);
  }
  __device__ __forceinline__ void decode(const Chunk& q, int64_t r, int c, float (&out)[kValues]) const {
    const float d14 = decode_2m14(q, r, c, out);
#pragma unroll
    for (int i = 0; i < kValues; ++i) out[i] = __fmul_rn(out[i], d14);
  }
  __device__ __forceinline__ float decode_folded(const Chunk& q, int64_t r, int c, float (&out)[kValues]) const {
    return decode_2m14(q, r, c, out);
  }
};

// The unsigned E4M3 value of an NVFP4 sub-block scale byte, as engine/model/quant.cpp's
// ue4m3_to_f32 gives it (sign bit ignored; 0x7F, refused at load, reads as 0).
__device__ __forceinline__ float ue4m3_decode(uint32_t v) {
  const uint32_t e = (v >> 3) & 15, m = v & 7;
  if (e == 15 && m == 7) return 0.0f;
  return e == 0 ? float(m) * 0x1p-9f : __uint_as_float(((e + 120) << 23) | (m << 20));
}

// NVFP4 as DeviceWeights keeps it (kernel_args.h): a chunk is one half of a 36-byte block
// (two 16-value sub-blocks: 16 code bytes and their 2 scale bytes, read as 4-byte words
// through the read-only cache, as BlockRows reads its blocks) decoded to e2m1 * e4m3,
// exact in f32 and in either 16-bit type (at most 5 significant bits, 2^-10 .. 2688); the
// row's scale multiplies the row's sum (row_scale below), so the tiles' 16-bit weights are
// exact and the decode takes one multiply a weight (e2m1_word). Sub-block s's byte j holds
// its value j (low nibble) and j + 8 (high nibble).
struct Nvfp4Rows {
  static constexpr int kValues = 32;
  using Chunk = const uint8_t*;
  const uint8_t* data;
  const float* scales;
  int64_t row_bytes;
  __device__ __forceinline__ Chunk load(int64_t r, int c) const { return data + r * row_bytes + int64_t(c / 64) * 36; }
  __device__ __forceinline__ Chunk at(int64_t r, int c) const { return load(r, c); }
  __device__ __forceinline__ void decode(const Chunk& b, int64_t, int c, float (&out)[kValues]) const {
    const int half = (c % 64) / 32;
    const uint32_t d4 = ld_word<4>(b);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int s = 2 * half + h;
      const float d14 = ue4m3_decode((d4 >> (8 * s)) & 0xFF) * 16384.0f;  // exact: at most 448 x 2^14
#pragma unroll
      for (int i = 0; i < 2; ++i)
        e2m1_word(ld_word<4>(b + 4 + 8 * s + 4 * i), d14, out + 16 * h + 4 * i, out + 16 * h + 8 + 4 * i);
    }
  }
  __device__ __forceinline__ float row_scale(int64_t r) const { return __ldg(scales + r); }
};

// The factor a reader leaves to each row's sum (Nvfp4Rows' row scale), which every kernel
// multiplies into a row's dot product before its epilogue; 1 for the readers that scale
// each weight as they decode it.
template <typename R>
__device__ __forceinline__ float row_scale(const R& w, int64_t r) {
  if constexpr (requires { w.row_scale(r); })
    return w.row_scale(r);
  else
    return 1.0f;
}

// Whether R's decode leaves a factor to each chunk's dot product (decode_folded).
template <typename R>
concept FoldsFactor = requires(const R& w, const typename R::Chunk& q, float (&out)[R::kValues]) {
  { w.decode_folded(q, int64_t(0), 0, out) } -> std::same_as<float>;
};

// Decodes chunk q of row r at column c into out without the factor the reader leaves to
// the chunk's dot product, and returns that factor: a FoldsFactor reader's decode_folded,
// else decode and 1. A GEMV sums a FoldsFactor chunk's products on their own and adds
// them with one fmaf(dot, factor, acc); the others' straight into the row's accumulator.
template <typename R>
__device__ __forceinline__ float decode_folded(const R& w, const typename R::Chunk& q, int64_t r, int c,
                                               float (&out)[R::kValues]) {
  if constexpr (FoldsFactor<R>) {
    return w.decode_folded(q, r, c, out);
  } else {
    w.decode(q, r, c, out);
    return 1.0f;
  }
}

// Calls f(reader) with the reader of w for compute type T: a stack of matrices of
// matrix_rows rows of k values each. w must be one segment (no tail): an MoE stack is.
template <typename T, typename F>
void with_weight_reader(const DeviceMatrix& w, int64_t matrix_rows, int64_t k, F&& f) {
  SPARK_CHECK(w.tail == nullptr, "an expert stack is one segment of one format");
  const auto* blocks = static_cast<const uint8_t*>(w.data);
  switch (w.format) {
    case WeightFormat::HALF: return f(HalfRows<T>{static_cast<const T*>(w.data), k});
    case WeightFormat::Q8_0: return f(Q8_0Rows{static_cast<const int8_t*>(w.data), static_cast<const f16*>(w.scales), k});
    case WeightFormat::Q4_0: return f(BlockRows<WeightFormat::Q4_0>{blocks, block_row_bytes(w.format, k)});
    case WeightFormat::Q4_1: return f(BlockRows<WeightFormat::Q4_1>{blocks, block_row_bytes(w.format, k)});
    case WeightFormat::Q4_K: return f(BlockRows<WeightFormat::Q4_K>{blocks, block_row_bytes(w.format, k)});
    case WeightFormat::Q5_K: return f(BlockRows<WeightFormat::Q5_K>{blocks, block_row_bytes(w.format, k)});
    case WeightFormat::Q6_K: return f(BlockRows<WeightFormat::Q6_K>{blocks, block_row_bytes(w.format, k)});
    case WeightFormat::Q5_0: return f(BlockRows<WeightFormat::Q5_0>{blocks, block_row_bytes(w.format, k)});
    case WeightFormat::Q5_1: return f(BlockRows<WeightFormat::Q5_1>{blocks, block_row_bytes(w.format, k)});
    case WeightFormat::FP8: {
      const int32_t br = w.scale_block_rows, bc = w.scale_block_cols;
      SPARK_CHECK(w.scales && br > 0 && bc > 0 && k % 16 == 0 && (bc % 16 == 0 || bc >= k),
                  "an FP8 expert stack needs scales, k a multiple of 16 and scale blocks of whole 16-value units");
      const int32_t grid_cols = int32_t(ceil_div(k, bc)), grid_rows = int32_t(ceil_div(matrix_rows, br));
      return f(Fp8Rows{blocks, static_cast<const float*>(w.scales), k, int32_t(matrix_rows), br, bc, grid_cols,
                       grid_rows * grid_cols});
    }
    case WeightFormat::MXFP4:
      SPARK_CHECK(w.scales && k % 32 == 0, "an MXFP4 expert stack needs scales and k a multiple of 32");
      return f(Mxfp4Rows{blocks, static_cast<const uint8_t*>(w.scales), k});
    case WeightFormat::NVFP4:
      SPARK_CHECK(w.scales && k % 64 == 0, "an NVFP4 matrix needs scales and k a multiple of 64");
      return f(Nvfp4Rows{blocks, static_cast<const float*>(w.scales), k / 64 * 36});
    default: SPARK_CHECK(false, std::string("the MoE kernels do not read ") + weight_format_name(w.format));
  }
}

}  // namespace spark::cuda
