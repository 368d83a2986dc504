// matmul.cpp — decode-then-dot matmul kernels for f32/f16/bf16, FP8 and GGUF block-quantized
// rows, chosen from one row of CPU kernels per DType.
#include "engine/backend/cpu/matmul.h"

#include <algorithm>
#include <array>
#include <type_traits>
#include <vector>

#include "engine/backend/cpu/block_values.h"
#include "engine/backend/cpu/quant_blocks.h"
#include "engine/backend/cpu/simd.h"
#include "engine/model/fp8_weights.h"
#include "engine/util/check.h"

#pragma GCC optimize("O3")
#if defined(__aarch64__)
// Batch invariance: the few-rows path and the decoded-tile path must give the same bits.
// aarch64 has FMA in its baseline, and GCC fuses `acc += w * x` in one path and not in the
// other (measured under qemu: Q8_0, Q4_0 and Q4_1 rows differed alone and in a batch), so
// every product is rounded on its own there, as in x86-64's portable clone.
#pragma GCC optimize("fp-contract=off")
#endif

namespace spark::cpu {

namespace {

// GCC may fuse a decoder's scale * q + min into an FMA in the AVX2 clone; the values still
// equal the loader's dequantization bit for bit because every scale * q product of these
// formats is exact in f32 (an 11-bit f16 mantissa times a 6-bit scale times a <= 6-bit q).
template <typename Block, int kElems>
SPARK_KERNEL void decode_blocks(const void* src, int64_t cols, float* out) {
  const Block* b = static_cast<const Block*>(src);
  const int64_t n = cols / kElems;
  for (int64_t i = 0; i < n; ++i) decode_block(b[i], out + i * kElems);
}

SPARK_KERNEL void decode_f16(const uint16_t* src, int64_t cols, float* out) {
  for (int64_t i = 0; i < cols; ++i) out[i] = f16_to_f32(src[i]);
}

SPARK_KERNEL void decode_bf16(const uint16_t* src, int64_t cols, float* out) {
  for (int64_t i = 0; i < cols; ++i) out[i] = bf16_to_f32(src[i]);
}

const float* row_f32(const Tensor& w, int64_t row, float* out);

// Bytes of one weight row.
size_t row_bytes(const Tensor& w) {
  return static_cast<size_t>(w.cols() / dtype_block_elems(w.dtype) * dtype_block_bytes(w.dtype));
}

// Row `row` of `w` (its bytes at `src`) as f32: decoded into `out`, or in place when it
// already is f32.
using RowDecoder = const float* (*)(const Tensor& w, int64_t row, const uint8_t* src, float* out);

const float* row_in_place(const Tensor&, int64_t, const uint8_t* src, float*) {
  return reinterpret_cast<const float*>(src);
}
const float* row_f16(const Tensor& w, int64_t, const uint8_t* src, float* out) {
  decode_f16(reinterpret_cast<const uint16_t*>(src), w.cols(), out);
  return out;
}
const float* row_bf16(const Tensor& w, int64_t, const uint8_t* src, float* out) {
  decode_bf16(reinterpret_cast<const uint16_t*>(src), w.cols(), out);
  return out;
}
template <typename Block>
const float* row_blocks(const Tensor& w, int64_t, const uint8_t* src, float* out) {
  decode_blocks<Block, 32 * kSubBlocks<Block>>(src, w.cols(), out);
  return out;
}

// NVFP4: the reference decoder, then the tensor's scale (one per tensor). A tensor still in
// ModelOpt's layout (the CPU backend's load repacks them all: materialize_nvfp4) is
// repacked a row at a time.
const float* row_nvfp4(const Tensor& w, int64_t row, const uint8_t* src, float* out) {
  thread_local std::vector<uint8_t> repacked;
  if (w.modelopt_block_scales) {
    repacked.resize(size_t(w.cols() / 64) * sizeof(BlockNVFP4));
    modelopt_nvfp4_row_to_blocks(static_cast<const uint8_t*>(w.data) + row * w.cols() / 2,
                                 w.modelopt_block_scales + row * w.cols() / 16, w.cols(), repacked.data());
    src = repacked.data();
  }
  decode::nvfp4(src, out, w.cols() / 64);
  if (w.scale != nullptr) apply_tensor_scales(w, row, out);
  return out;
}

// Dot products of NW (1..3) weight rows with NX (1..4) activation rows: a register tile,
// so every loaded vector feeds several FMAs (3 x 4 fills the 16 AVX2 registers with 12
// accumulators, and loads 7 vectors per 12 FMAs). Each pair has one accumulator, filled in
// element order, whatever the tile's shape: a row's result never depends on which other
// rows share its tile, so a sequence's logits do not depend on what else is in its batch.
template <int NW, int NX>
[[gnu::always_inline]] inline void dot_tile(const float* const* w, const float* x, int64_t x_stride, int64_t n,
                                            float* y, int64_t y_stride) {
  const int64_t n8 = n & ~int64_t{7};
  v8f acc[NW][NX] = {};
  for (int64_t i = 0; i < n8; i += 8) {
    v8f wv[NW];
    for (int k = 0; k < NW; ++k) wv[k] = load8(w[k] + i);
    for (int r = 0; r < NX; ++r) {
      const v8f v = load8(x + r * x_stride + i);
      for (int k = 0; k < NW; ++k) acc[k][r] += wv[k] * v;
    }
  }
  for (int k = 0; k < NW; ++k)
    for (int r = 0; r < NX; ++r) {
      float s = hsum8(acc[k][r]);
      for (int64_t i = n8; i < n; ++i) s += w[k][i] * x[r * x_stride + i];
      y[r * y_stride + k] = s;
    }
}

// How many weight rows the callers below decode to f32 before running the tile over them.
constexpr int kTileRows = 3;

// The NW weight rows `w` (already f32) times every activation row, four at a time.
template <int NW>
[[gnu::always_inline]] inline void dot_rows(const float* const* w, const float* x, int64_t rows, int64_t n,
                                            float* y, int64_t y_stride) {
  for (int64_t r = 0; r < rows; r += 4) {
    const float* xr = x + r * n;
    float* yr = y + r * y_stride;
    switch (std::min<int64_t>(4, rows - r)) {
      case 4: dot_tile<NW, 4>(w, xr, n, n, yr, y_stride); break;
      case 3: dot_tile<NW, 3>(w, xr, n, n, yr, y_stride); break;
      case 2: dot_tile<NW, 2>(w, xr, n, n, yr, y_stride); break;
      default: dot_tile<NW, 1>(w, xr, n, n, yr, y_stride); break;
    }
  }
}

template <int NW = kTileRows>
[[gnu::always_inline]] inline void dot_rows(int nw, const float* const* w, const float* x, int64_t rows, int64_t n,
                                            float* y, int64_t y_stride) {
  if constexpr (NW > 1) {
    if (nw < NW) return dot_rows<NW - 1>(nw, w, x, rows, n, y, y_stride);
  }
  dot_rows<NW>(w, x, rows, n, y, y_stride);
}

// Weight rows [out_begin, out_end) decoded to f32 a block at a time (`decode(row, out)`
// returns the row's values, in `out` or in place), each block multiplied by every
// activation row, the activation rows taken a panel at a time: the block and the panel
// stay in cache together (half of kCacheBytes each). Without panels a step of thousands of
// rows (an embedding batch, a long prefill) streamed the whole activation matrix from
// memory once per kTileRows weight rows: 8,192-token steps ran at 0.65x the speed per token
// of 512-token ones. The order of each dot product is dot_tile's, so the blocking never
// changes a result. `done(o, nw)` runs after weight rows [o, o + nw) have every result.
constexpr int64_t kCacheBytes = 256 << 10;
constexpr int64_t kMaxBlockRows = 16 * kTileRows;

template <typename Decode, typename Done>
[[gnu::always_inline]] inline void blocked_rows(Decode&& decode, Done&& done, const float* x, int64_t rows, int64_t n,
                                                int64_t out_begin, int64_t out_end, float* y, int64_t y_stride) {
  const int64_t row_bytes = 4 * std::max<int64_t>(n, 1);
  const int64_t block = std::clamp<int64_t>(kCacheBytes / 2 / row_bytes / kTileRows, 1, kMaxBlockRows / kTileRows) * kTileRows;
  const int64_t panel = std::max<int64_t>(4, kCacheBytes / 2 / row_bytes / 4 * 4);
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(block * n));
  const float* wr[kMaxBlockRows];
  for (int64_t o = out_begin; o < out_end; o += block) {
    const int64_t nb = std::min(block, out_end - o);
    for (int64_t k = 0; k < nb; ++k) wr[k] = decode(o + k, buf.data() + k * n);
    for (int64_t r = 0; r < rows; r += panel) {
      const int64_t nr = std::min(panel, rows - r);
      for (int64_t k = 0; k < nb; k += kTileRows)
        dot_rows(static_cast<int>(std::min<int64_t>(kTileRows, nb - k)), wr + k, x + r * n, nr, n,
                 y + r * y_stride + o + k, y_stride);
    }
    done(o, nb);
  }
}

// Rows of any decodable dtype, through blocked_rows.
SPARK_KERNEL void decoded_rows(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end,
                               float* y, int64_t y_stride) {
  blocked_rows([&w](int64_t row, float* out) { return row_f32(w, row, out); }, [](int64_t, int64_t) {}, x, rows,
               w.cols(), out_begin, out_end, y, y_stride);
}

// Block-quantized rows, decoded 32 weights at a time in registers by `Blocks`. Few
// activation rows (up to 8: a decode step of a few sequences, or one sequence verifying
// drafts): each sub-block is decoded next to the FMAs that use it and the weights are
// never stored as f32. More rows: weight rows are decoded to f32 a block at a time and the
// f32 tile above runs the activation rows past them (blocked_rows). Both compute the same weights
// and the same dot products in the same order, so the choice never changes a result.

// NO weight rows (consecutive, from `wr`) times NX activation rows. Each pair's
// accumulator takes four dependent FMAs per sub-block, so several weight rows run side
// by side to keep the FMA units busy when there are few activation rows.
template <typename Block, typename Blocks, int NO, int NX>
[[gnu::always_inline]] inline void quant_tile(Blocks& blocks, const Block* wr, int64_t nb, const float* x, int64_t n,
                                              float* y, int64_t y_stride) {
  constexpr int S = kSubBlocks<Block>;
  v8f acc[NO][NX] = {};
  for (int64_t b = 0; b < nb; ++b)
    for (int j = 0; j < NO; ++j) {
      // Several short row streams at once: on its own the hardware prefetcher lets the
      // decode wait on memory (measured: Q8_0 at batch 1 about 1.5x faster with this).
      __builtin_prefetch(reinterpret_cast<const char*>(wr + j * nb + b) + 256);
      for (int s = 0; s < S; ++s) {
        v8f w[4];
        blocks.decode(wr[j * nb + b], s, w);
        const float* xs = x + 32 * (S * b + s);
        for (int k = 0; k < 4; ++k)
          for (int r = 0; r < NX; ++r) acc[j][r] += w[k] * load8(xs + r * n + 8 * k);
      }
    }
  for (int j = 0; j < NO; ++j)
    for (int r = 0; r < NX; ++r) y[r * y_stride + j] = hsum8(acc[j][r]);
}

template <typename Block, typename Blocks, int NX>
[[gnu::always_inline]] inline void quant_few_rows(Blocks& decoder, const Block* blocks, int64_t nb, const float* x,
                                                  int64_t n, int64_t out_begin, int64_t out_end, float* y,
                                                  int64_t y_stride) {
  // Q8_0's light decode leaves registers for four rows at batch 1; with the nibble
  // formats' temporaries four rows spill (measured: Q4_1 ~20% slower with four than two).
  // Past four activation rows their accumulators alone fill the registers: one weight row.
  constexpr int NO = NX > 4 ? 1 : NX == 1 && std::is_same_v<Block, BlockQ8_0> ? 4 : 2;
  int64_t o = out_begin;
  for (; o + NO <= out_end; o += NO)
    quant_tile<Block, Blocks, NO, NX>(decoder, blocks + o * nb, nb, x, n, y + o, y_stride);
  for (; o < out_end; ++o) quant_tile<Block, Blocks, 1, NX>(decoder, blocks + o * nb, nb, x, n, y + o, y_stride);
}

template <typename Block, typename Blocks>
[[gnu::always_inline]] inline void quant_rows_body(const float* x, int64_t rows, const Tensor& w, int64_t out_begin,
                                                   int64_t out_end, float* y, int64_t y_stride) {
  constexpr int S = kSubBlocks<Block>;
  const int64_t n = w.cols(), nb = n / (32 * S);
  const Block* blocks = static_cast<const Block*>(w.data);
  Blocks decoder;
  switch (rows) {
    case 1: return quant_few_rows<Block, Blocks, 1>(decoder, blocks, nb, x, n, out_begin, out_end, y, y_stride);
    case 2: return quant_few_rows<Block, Blocks, 2>(decoder, blocks, nb, x, n, out_begin, out_end, y, y_stride);
    case 3: return quant_few_rows<Block, Blocks, 3>(decoder, blocks, nb, x, n, out_begin, out_end, y, y_stride);
    case 4: return quant_few_rows<Block, Blocks, 4>(decoder, blocks, nb, x, n, out_begin, out_end, y, y_stride);
    case 5: return quant_few_rows<Block, Blocks, 5>(decoder, blocks, nb, x, n, out_begin, out_end, y, y_stride);
    case 6: return quant_few_rows<Block, Blocks, 6>(decoder, blocks, nb, x, n, out_begin, out_end, y, y_stride);
    case 7: return quant_few_rows<Block, Blocks, 7>(decoder, blocks, nb, x, n, out_begin, out_end, y, y_stride);
    case 8: return quant_few_rows<Block, Blocks, 8>(decoder, blocks, nb, x, n, out_begin, out_end, y, y_stride);
    default: break;
  }
  const auto decode_row = [&](int64_t row, float* out) -> const float* {
    const Block* wr = blocks + row * nb;
    for (int64_t b = 0; b < nb; ++b)
      for (int s = 0; s < S; ++s) {
        v8f v[4];
        decoder.decode(wr[b], s, v);
        for (int j = 0; j < 4; ++j) store8(out + 32 * (S * b + s) + 8 * j, v[j]);
      }
    return out;
  };
  blocked_rows(decode_row, [](int64_t, int64_t) {}, x, rows, n, out_begin, out_end, y, y_stride);
}

template <typename Block>
void quant_rows_portable(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end,
                         float* y, int64_t y_stride) {
  quant_rows_body<Block, PortableBlocks>(x, rows, w, out_begin, out_end, y, y_stride);
}

#if SPARK_X86_AVX2
template <typename Block>
SPARK_AVX2 void quant_rows_avx2(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end,
                                float* y, int64_t y_stride) {
  quant_rows_body<Block, Avx2Blocks>(x, rows, w, out_begin, out_end, y, y_stride);
}
#endif

template <typename Block>
void quant_rows(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end, float* y,
                int64_t y_stride) {
#if SPARK_X86_AVX2
  if (cpu_has_avx2()) return quant_rows_avx2<Block>(x, rows, w, out_begin, out_end, y, y_stride);
#endif
  quant_rows_portable<Block>(x, rows, w, out_begin, out_end, y, y_stride);
}

// FP8: F8_E4M3 weights with f32 scales (Tensor::scale), per tensor, per row or in blocks.
// The bytes decode 16 at a time in registers; each scale is read once per scale block of a
// row, never per weight. Where a row has one scale (per tensor, per row: FP8 at load, FP8
// checkpoints' per-channel scales) it multiplies the row's dot product once. Where it has
// several (Qwen3-FP8's 128x128 blocks) it multiplies each weight, one multiply per 8
// weights: folding it into each block's partial sum instead would need a blocked copy of
// the f32 tile, which every batch size must share to keep its bits.

// The 256 e4m3 codes as f32 (0x7f and 0xff are NaN).
const float* e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[size_t(i)] = fp8_e4m3_to_f32(static_cast<uint8_t>(i));
    return t;
  }();
  return table.data();
}

// 16 e4m3 codes to f32 in two registers, each value times kUnit, by table; scale(s) is
// what they are multiplied by to be times s.
constexpr int kFp8Group = 16;
struct Fp8Portable {
  static constexpr float kUnit = 1.0f;
  const float* table = e4m3_values();
  [[gnu::always_inline]] v8f scale(float s) const { return splat8(s); }
  [[gnu::always_inline]] void decode(const uint8_t* q, v8f w[2]) const {
    float v[kFp8Group];
    for (int k = 0; k < kFp8Group; ++k) v[k] = table[q[k]];
    w[0] = load8(v);
    w[1] = load8(v + 8);
  }
};

#if SPARK_X86_AVX2
// The same by moving bits (a gather from the table is slower): e4m3's sign, exponent and
// mantissa, shifted into an IEEE half, are the value / 256 exactly (exponent bias 15
// against 7; e4m3's subnormals land on the half's), which F16C widens. Scales carry the
// 256, a power of two, so (v / 256) * (s * 256) rounds as v * s.
struct Fp8Avx2 {
  static constexpr float kUnit = 1.0f / 256;
  // Not splat8: GCC builds that one lane at a time here, and the loop spills (measured).
  SPARK_AVX2 static inline v8f scale(float s) { return (v8f)_mm256_set1_ps(s / kUnit); }
  SPARK_AVX2 static inline void decode(const uint8_t* q, v8f w[2]) {
    // Sign-extended bytes shifted left 7: the sign lands on bits 15 and 14; 0xbf80 keeps
    // bit 15 and the 7 bits of exponent and mantissa at bits 13-7.
    const __m256i b = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    __m256i h = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(static_cast<int16_t>(0xbf80)));
    // e4m3's NaNs (all 7 bits set) would read as 480: give them the half's NaN exponent.
    const __m256i all = _mm256_set1_epi16(0x3f80);
    h = _mm256_or_si256(h, _mm256_and_si256(_mm256_cmpeq_epi16(_mm256_and_si256(h, all), all),
                                            _mm256_set1_epi16(0x7c00)));
    w[0] = (v8f)_mm256_cvtph_ps(_mm256_castsi256_si128(h));
    w[1] = (v8f)_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  }
};
#endif

// Row `row`'s bytes and its row of scales (one per scale block along it).
struct Fp8Row {
  const uint8_t* q;
  const float* scales;
};
Fp8Row fp8_row(const Tensor& w, int64_t row) {
  return {static_cast<const uint8_t*>(w.data) + row * w.cols(), w.scale + row / w.scale_block_rows * w.scale_grid_cols()};
}

// Row `row` to f32, any layout: 16 weights at a time within each scale block, the rest of a
// block (rows or blocks not a multiple of 16 long) one at a time by table, the same values.
// Scaled: the loader's values. Not (kRowScale below): the codes' values times kUnit.
template <bool kScaled, typename Fp8>
[[gnu::always_inline]] inline void fp8_decode_row(const Fp8& dec, const Tensor& w, int64_t row, float* out) {
  const Fp8Row r = fp8_row(w, row);
  const float* table = e4m3_values();
  const int64_t n = w.cols(), sbc = w.scale_block_cols;
  for (int64_t b = 0, c0 = 0; c0 < n; ++b, c0 += sbc) {
    const int64_t c1 = std::min(n, c0 + sbc);
    const float s = kScaled ? r.scales[b] : Fp8::kUnit;
    const v8f sv = dec.scale(s);
    int64_t c = c0;
    for (; c + kFp8Group <= c1; c += kFp8Group) {
      v8f v[2];
      dec.decode(r.q + c, v);
      store8(out + c, kScaled ? v[0] * sv : v[0]);
      store8(out + c + 8, kScaled ? v[1] * sv : v[1]);
    }
    for (; c < c1; ++c) out[c] = table[r.q[c]] * s;
  }
}

SPARK_KERNEL const float* row_fp8(const Tensor& w, int64_t row, const uint8_t*, float* out) {
  SPARK_CHECK(w.scale != nullptr, "FP8 tensor " + w.name + " has no scales");
  fp8_decode_row<true>(Fp8Portable{}, w, row, out);
  return out;
}

// NO weight rows from `o` times NX activation rows, 16 weights at a time decoded in
// registers next to the FMAs that use them, in the f32 tile's order (dot_tile): one
// accumulator per pair, filled in element order. Needs rows of whole 16-weight groups,
// each under one scale. kRowScale: one scale per row, applied to the sum.
template <typename Fp8, bool kRowScale, int NO, int NX>
[[gnu::always_inline]] inline void fp8_tile(const Fp8& dec, const Tensor& w, int64_t o, const float* x, float* y,
                                            int64_t y_stride) {
  const int64_t n = w.cols(), sbc = w.scale_block_cols;
  Fp8Row r[NO];
  for (int j = 0; j < NO; ++j) r[j] = fp8_row(w, o + j);
  v8f acc[NO][NX] = {};
  for (int64_t b = 0, c0 = 0; c0 < n; ++b, c0 += sbc) {
    const int64_t c1 = std::min(n, c0 + sbc);
    v8f s[NO];
    if (!kRowScale)
      for (int j = 0; j < NO; ++j) s[j] = dec.scale(r[j].scales[b]);
    for (int64_t c = c0; c < c1; c += kFp8Group)
      for (int j = 0; j < NO; ++j) {
        // As in quant_tile: several row streams at once outrun the hardware prefetcher.
        __builtin_prefetch(r[j].q + c + 256);
        v8f wv[2];
        dec.decode(r[j].q + c, wv);
        for (int h = 0; h < 2; ++h) {
          if (!kRowScale) wv[h] *= s[j];
          for (int k = 0; k < NX; ++k) acc[j][k] += wv[h] * load8(x + k * n + c + 8 * h);
        }
      }
  }
  for (int j = 0; j < NO; ++j)
    for (int k = 0; k < NX; ++k)
      y[k * y_stride + j] = kRowScale ? hsum8(acc[j][k]) * (r[j].scales[0] / Fp8::kUnit) : hsum8(acc[j][k]);
}

template <typename Fp8, bool kRowScale, int NX>
[[gnu::always_inline]] inline void fp8_few_rows(const Fp8& dec, const Tensor& w, const float* x, int64_t out_begin,
                                                int64_t out_end, float* y, int64_t y_stride) {
  // Past four activation rows their accumulators fill the registers: one weight row.
  constexpr int NO = NX > 4 ? 1 : NX == 1 ? 4 : 2;
  int64_t o = out_begin;
  for (; o + NO <= out_end; o += NO) fp8_tile<Fp8, kRowScale, NO, NX>(dec, w, o, x, y + o, y_stride);
  for (; o < out_end; ++o) fp8_tile<Fp8, kRowScale, 1, NX>(dec, w, o, x, y + o, y_stride);
}

// Up to 8 activation rows: fp8_tile. More, or a layout fp8_tile cannot take: weight rows
// decoded a block at a time, then the f32 tile (blocked_rows), then the row scale if one.
// Both compute the same weights, sums and products in the same order, so the choice never
// changes a result.
template <typename Fp8, bool kRowScale>
[[gnu::always_inline]] inline void fp8_rows_layout(const Fp8& dec, const float* x, int64_t rows, const Tensor& w,
                                                   int64_t out_begin, int64_t out_end, float* y, int64_t y_stride) {
  const int64_t n = w.cols();
  if (n % kFp8Group == 0 && (kRowScale || w.scale_block_cols % kFp8Group == 0)) switch (rows) {
      case 1: return fp8_few_rows<Fp8, kRowScale, 1>(dec, w, x, out_begin, out_end, y, y_stride);
      case 2: return fp8_few_rows<Fp8, kRowScale, 2>(dec, w, x, out_begin, out_end, y, y_stride);
      case 3: return fp8_few_rows<Fp8, kRowScale, 3>(dec, w, x, out_begin, out_end, y, y_stride);
      case 4: return fp8_few_rows<Fp8, kRowScale, 4>(dec, w, x, out_begin, out_end, y, y_stride);
      case 5: return fp8_few_rows<Fp8, kRowScale, 5>(dec, w, x, out_begin, out_end, y, y_stride);
      case 6: return fp8_few_rows<Fp8, kRowScale, 6>(dec, w, x, out_begin, out_end, y, y_stride);
      case 7: return fp8_few_rows<Fp8, kRowScale, 7>(dec, w, x, out_begin, out_end, y, y_stride);
      case 8: return fp8_few_rows<Fp8, kRowScale, 8>(dec, w, x, out_begin, out_end, y, y_stride);
      default: break;
    }
  const auto decode_row = [&](int64_t row, float* out) -> const float* {
    fp8_decode_row<!kRowScale>(dec, w, row, out);
    return out;
  };
  const auto scale_rows = [&](int64_t o, int64_t nw) {
    if (kRowScale)
      for (int64_t k = 0; k < nw; ++k) {
        const float s = fp8_row(w, o + k).scales[0] / Fp8::kUnit;
        for (int64_t r = 0; r < rows; ++r) y[r * y_stride + o + k] *= s;
      }
  };
  blocked_rows(decode_row, scale_rows, x, rows, n, out_begin, out_end, y, y_stride);
}

template <typename Fp8>
[[gnu::always_inline]] inline void fp8_rows_body(const float* x, int64_t rows, const Tensor& w, int64_t out_begin,
                                                 int64_t out_end, float* y, int64_t y_stride) {
  SPARK_CHECK(w.scale != nullptr, "FP8 tensor " + w.name + " has no scales");
  const Fp8 dec;
  if (w.scale_block_cols >= w.cols()) return fp8_rows_layout<Fp8, true>(dec, x, rows, w, out_begin, out_end, y, y_stride);
  fp8_rows_layout<Fp8, false>(dec, x, rows, w, out_begin, out_end, y, y_stride);
}

void fp8_rows_portable(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end, float* y,
                       int64_t y_stride) {
  fp8_rows_body<Fp8Portable>(x, rows, w, out_begin, out_end, y, y_stride);
}

#if SPARK_X86_AVX2
SPARK_AVX2 void fp8_rows_avx2(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end,
                              float* y, int64_t y_stride) {
  fp8_rows_body<Fp8Avx2>(x, rows, w, out_begin, out_end, y, y_stride);
}
#endif

void fp8_rows(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end, float* y,
              int64_t y_stride) {
#if SPARK_X86_AVX2
  if (cpu_has_avx2()) return fp8_rows_avx2(x, rows, w, out_begin, out_end, y, y_stride);
#endif
  fp8_rows_portable(x, rows, w, out_begin, out_end, y, y_stride);
}

// The CPU kernels of each DType, one row per DType in the enum's order: how a row decodes
// to f32 (nullptr: matmul does not read the type) and which kernel multiplies its rows.
// The block formats' kernels are templates over their block, so the inner loops know the
// block at compile time; the table only picks one per call.
using RowsKernel = void (*)(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end,
                            float* y, int64_t y_stride);
struct CpuKernels {
  DType type;
  RowDecoder row;
  RowsKernel rows;
};

constexpr CpuKernels unread(DType t) { return {t, nullptr, nullptr}; }
constexpr CpuKernels decoded(DType t, RowDecoder row) { return {t, row, decoded_rows}; }
template <typename Block>
constexpr CpuKernels blocks(DType t) { return {t, row_blocks<Block>, quant_rows<Block>}; }

constexpr std::array<CpuKernels, size_t(DType::COUNT)> kKernels{{
    unread(DType::F64),
    decoded(DType::F32, row_in_place),
    decoded(DType::F16, row_f16),
    decoded(DType::BF16, row_bf16),
    unread(DType::I64),
    unread(DType::I32),
    unread(DType::I16),
    unread(DType::I8),
    unread(DType::U8),
    unread(DType::BOOL),
    {DType::F8_E4M3, row_fp8, fp8_rows},
    unread(DType::F8_E5M2),
    blocks<BlockQ4_0>(DType::Q4_0),
    blocks<BlockQ4_1>(DType::Q4_1),
    blocks<BlockQ8_0>(DType::Q8_0),
    blocks<BlockQ4_K>(DType::Q4_K),
    blocks<BlockQ5_K>(DType::Q5_K),
    blocks<BlockQ6_K>(DType::Q6_K),
    // Its E8M0 scales have no register decoder yet: rows decode whole, then the f32 tile.
    decoded(DType::MXFP4, row_blocks<BlockMXFP4>),
    decoded(DType::NVFP4, row_nvfp4),
    // Rare (llama-quantize's fallback for rows not of whole K-quant blocks): rows decode
    // whole, then the f32 tile.
    decoded(DType::Q5_0, row_blocks<BlockQ5_0>),
    decoded(DType::Q5_1, row_blocks<BlockQ5_1>),
}};

constexpr bool kernels_in_order() {
  for (size_t i = 0; i < kKernels.size(); ++i)
    if (kKernels[i].type != DType(i)) return false;
  return true;
}
static_assert(kernels_in_order(), "matmul.cpp: one row of CPU kernels per DType, in the enum's order");

const CpuKernels& kernels_of(const Tensor& w) {
  SPARK_CHECK(matmul_supports(w.dtype), "matmul: unsupported weight dtype " + std::string(dtype_name(w.dtype)));
  return kKernels[size_t(w.dtype)];
}

// Decodes row `row` into `out`, or returns a pointer to it in place when it already is f32.
const float* row_f32(const Tensor& w, int64_t row, float* out) {
  const uint8_t* src = static_cast<const uint8_t*>(w.data) + row_bytes(w) * static_cast<size_t>(row);
  return kernels_of(w).row(w, row, src, out);
}

}  // namespace

bool matmul_supports(DType t) { return size_t(t) < kKernels.size() && kKernels[size_t(t)].row != nullptr; }

void decode_row(const Tensor& w, int64_t row, float* out) {
  SPARK_CHECK(row >= 0 && row < w.rows(), "decode_row: row out of range in " + w.name);
  const float* p = row_f32(w, row, out);
  if (p != out) std::copy(p, p + w.cols(), out);
}

void matmul_rows(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end,
                 float* y, int64_t y_stride) {
  kernels_of(w).rows(x, rows, w, out_begin, out_end, y, y_stride);
}

void matmul(ThreadPool& pool, const float* x, int64_t rows, const Tensor& w, float* y) {
  matmul_many(pool, x, rows, {{&w, y}});
}

void matmul_many(ThreadPool& pool, const float* x, int64_t rows, std::initializer_list<MatmulOut> outs) {
  // Output rows of all matrices are numbered one after another; each chunk of that range
  // is split at matrix boundaries.
  int64_t total = 0;
  for (const MatmulOut& m : outs) {
    SPARK_CHECK(m.w->shape.size() == 2, "matmul: weight " + m.w->name + " is not 2-D");
    SPARK_CHECK(matmul_supports(m.w->dtype), "matmul: unsupported dtype of " + m.w->name);
    SPARK_CHECK(m.w->cols() == outs.begin()->w->cols(), "matmul_many: weights disagree on the input size");
    total += m.w->rows();
  }
  // Chunks of output rows small enough to balance threads, large enough to amortize
  // dispatch; a multiple of 48 keeps the tiles of 2, 3 and 4 weight rows whole.
  int64_t grain = std::max<int64_t>(2, total / (8 * pool.size()));
  grain = (grain + 47) / 48 * 48;
  pool.parallel_for(total, grain, [&](int64_t begin, int64_t end) {
    int64_t base = 0;
    for (const MatmulOut& m : outs) {
      const int64_t n = m.w->rows();
      const int64_t lo = std::max(begin, base), hi = std::min(end, base + n);
      if (lo < hi) matmul_rows(x, rows, *m.w, lo - base, hi - base, m.y, n);
      base += n;
    }
  });
}

}  // namespace spark::cpu
