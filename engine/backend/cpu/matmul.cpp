// matmul.cpp — decode-then-dot matmul kernels for f32/f16/bf16 and GGUF block-quantized rows.
#include "engine/backend/cpu/matmul.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "engine/backend/cpu/quant_blocks.h"
#include "engine/backend/cpu/simd.h"
#include "engine/util/check.h"

#pragma GCC optimize("O3")

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

// Bytes of one weight row.
size_t row_bytes(const Tensor& w) {
  return static_cast<size_t>(w.cols() / dtype_block_elems(w.dtype) * dtype_block_bytes(w.dtype));
}

// Decodes row `row` into `out`, or returns a pointer to it in place when it already is f32.
const float* row_f32(const Tensor& w, int64_t row, float* out) {
  const int64_t cols = w.cols();
  const uint8_t* src = static_cast<const uint8_t*>(w.data) + row_bytes(w) * static_cast<size_t>(row);
  switch (w.dtype) {
    case DType::F32: return reinterpret_cast<const float*>(src);
    case DType::F16: decode_f16(reinterpret_cast<const uint16_t*>(src), cols, out); break;
    case DType::BF16: decode_bf16(reinterpret_cast<const uint16_t*>(src), cols, out); break;
    case DType::Q8_0: decode_blocks<BlockQ8_0, 32>(src, cols, out); break;
    case DType::Q4_0: decode_blocks<BlockQ4_0, 32>(src, cols, out); break;
    case DType::Q4_1: decode_blocks<BlockQ4_1, 32>(src, cols, out); break;
    case DType::Q4_K: decode_blocks<BlockQ4_K, 256>(src, cols, out); break;
    case DType::Q5_K: decode_blocks<BlockQ5_K, 256>(src, cols, out); break;
    case DType::Q6_K: decode_blocks<BlockQ6_K, 256>(src, cols, out); break;
    default: SPARK_CHECK(false, "matmul: unsupported weight dtype " + std::string(dtype_name(w.dtype)));
  }
  return out;
}

// Dot products of two weight rows with up to four activation rows: a 2x4 register tile,
// so every loaded vector feeds several FMAs.
SPARK_KERNEL void dot_tile(const float* w0, const float* w1, const float* x, int64_t x_stride, int nx,
                           int64_t n, float* y, int64_t y_stride, int nw) {
  const int64_t n8 = n & ~int64_t{7};
  if (nw == 2 && nx == 4) {
    v8f a00{}, a01{}, a02{}, a03{}, a10{}, a11{}, a12{}, a13{};
    const float* x0 = x;
    const float* x1 = x + x_stride;
    const float* x2 = x + 2 * x_stride;
    const float* x3 = x + 3 * x_stride;
    for (int64_t i = 0; i < n8; i += 8) {
      const v8f wa = load8(w0 + i), wb = load8(w1 + i);
      v8f v = load8(x0 + i);
      a00 += wa * v;
      a10 += wb * v;
      v = load8(x1 + i);
      a01 += wa * v;
      a11 += wb * v;
      v = load8(x2 + i);
      a02 += wa * v;
      a12 += wb * v;
      v = load8(x3 + i);
      a03 += wa * v;
      a13 += wb * v;
    }
    float s[2][4] = {{hsum8(a00), hsum8(a01), hsum8(a02), hsum8(a03)},
                     {hsum8(a10), hsum8(a11), hsum8(a12), hsum8(a13)}};
    for (int64_t i = n8; i < n; ++i)
      for (int r = 0; r < 4; ++r) {
        s[0][r] += w0[i] * x[r * x_stride + i];
        s[1][r] += w1[i] * x[r * x_stride + i];
      }
    for (int r = 0; r < 4; ++r) {
      y[r * y_stride] = s[0][r];
      y[r * y_stride + 1] = s[1][r];
    }
    return;
  }
  // Edges of the tile: any nw <= 2 and nx <= 4, one pair at a time.
  for (int k = 0; k < nw; ++k) {
    const float* w = k == 0 ? w0 : w1;
    for (int r = 0; r < nx; ++r) {
      const float* xr = x + r * x_stride;
      v8f acc0{}, acc1{};
      int64_t i = 0;
      for (; i + 16 <= n8; i += 16) {
        acc0 += load8(w + i) * load8(xr + i);
        acc1 += load8(w + i + 8) * load8(xr + i + 8);
      }
      for (; i < n8; i += 8) acc0 += load8(w + i) * load8(xr + i);
      float s = hsum8(acc0 + acc1);
      for (i = n8; i < n; ++i) s += w[i] * xr[i];
      y[r * y_stride + k] = s;
    }
  }
}

// The 32 quantized values of a Q*_0/1 block as f32, without scale or offset.
inline void block_values(const BlockQ8_0& b, v8f q[4]) {
  for (int k = 0; k < 4; ++k) {
    v8i8 v;
    std::memcpy(&v, b.qs + 8 * k, sizeof(v));
    q[k] = to_f(v);
  }
}
inline void block_values(const BlockQ4_0& b, v8f q[4]) {
  const v8f eight = splat8(8.0f);
  for (int k = 0; k < 2; ++k) {
    const v8u8 v = load8u(b.qs + 8 * k);
    q[k] = to_f(v & 0x0f) - eight;
    q[k + 2] = to_f(v >> 4) - eight;
  }
}
inline void block_values(const BlockQ4_1& b, v8f q[4]) {
  for (int k = 0; k < 2; ++k) {
    const v8u8 v = load8u(b.qs + 8 * k);
    q[k] = to_f(v & 0x0f);
    q[k + 2] = to_f(v >> 4);
  }
}
inline float block_offset(const BlockQ4_1& b) { return f16_to_f32(b.m); }
template <typename Block>
inline float block_offset(const Block&) { return 0.0f; }

// Weight rows of 32-value blocks times up to four activation rows without materializing
// the f32 row: sum_i (d q_i + m) x_i = d * sum_i q_i x_i + m * sum_i x_i, with the block
// sums of x computed once per call. Decode steps (one to a few rows) spend most of their
// time here, so this saves the store and reload of every decoded weight.
template <typename Block>
SPARK_KERNEL void fused_rows(const float* x, int nx, int64_t n, const Tensor& w, int64_t out_begin,
                             int64_t out_end, float* y, int64_t y_stride) {
  const int64_t nb = n / 32;
  thread_local std::vector<float> xsum;
  constexpr bool has_offset = std::is_same_v<Block, BlockQ4_1>;
  if (has_offset) {
    xsum.resize(static_cast<size_t>(nx * nb));
    for (int r = 0; r < nx; ++r)
      for (int64_t b = 0; b < nb; ++b) {
        v8f s = load8(x + r * n + 32 * b) + load8(x + r * n + 32 * b + 8) + load8(x + r * n + 32 * b + 16) +
                load8(x + r * n + 32 * b + 24);
        xsum[static_cast<size_t>(r * nb + b)] = hsum8(s);
      }
  }
  const Block* rows = static_cast<const Block*>(w.data);
  for (int64_t o = out_begin; o < out_end; ++o) {
    const Block* wr = rows + o * nb;
    v8f acc[4] = {};
    float offs[4] = {};
    for (int64_t b = 0; b < nb; ++b) {
      v8f q[4];
      block_values(wr[b], q);
      const v8f d = splat8(f16_to_f32(wr[b].d));
      for (int r = 0; r < nx; ++r) {
        const float* xr = x + r * n + 32 * b;
        const v8f t = q[0] * load8(xr) + q[1] * load8(xr + 8) + q[2] * load8(xr + 16) + q[3] * load8(xr + 24);
        acc[r] += d * t;
        if (has_offset) offs[r] += block_offset(wr[b]) * xsum[static_cast<size_t>(r * nb + b)];
      }
    }
    for (int r = 0; r < nx; ++r) y[r * y_stride + o] = hsum8(acc[r]) + offs[r];
  }
}

}  // namespace

bool matmul_supports(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_1: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return true;
    default: return false;
  }
}

void decode_row(const Tensor& w, int64_t row, float* out) {
  SPARK_CHECK(row >= 0 && row < w.rows(), "decode_row: row out of range in " + w.name);
  const float* p = row_f32(w, row, out);
  if (p != out) std::copy(p, p + w.cols(), out);
}

void matmul_rows(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end,
                 float* y, int64_t y_stride) {
  const int64_t n = w.cols();
  if (rows <= 4 && (w.dtype == DType::Q8_0 || w.dtype == DType::Q4_0 || w.dtype == DType::Q4_1)) {
    const int nx = static_cast<int>(rows);
    if (w.dtype == DType::Q8_0) fused_rows<BlockQ8_0>(x, nx, n, w, out_begin, out_end, y, y_stride);
    if (w.dtype == DType::Q4_0) fused_rows<BlockQ4_0>(x, nx, n, w, out_begin, out_end, y, y_stride);
    if (w.dtype == DType::Q4_1) fused_rows<BlockQ4_1>(x, nx, n, w, out_begin, out_end, y, y_stride);
    return;
  }
  // Two decoded weight rows, reused across every activation row.
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(2 * n)) buf.resize(static_cast<size_t>(2 * n));
  for (int64_t o = out_begin; o < out_end; o += 2) {
    const int nw = out_end - o >= 2 ? 2 : 1;
    const float* w0 = row_f32(w, o, buf.data());
    const float* w1 = nw == 2 ? row_f32(w, o + 1, buf.data() + n) : w0;
    for (int64_t r = 0; r < rows; r += 4) {
      const int nx = static_cast<int>(std::min<int64_t>(4, rows - r));
      dot_tile(w0, w1, x + r * n, n, nx, n, y + r * y_stride + o, y_stride, nw);
    }
  }
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
  // dispatch; a multiple of 16 keeps the 2-row tile whole.
  int64_t grain = std::max<int64_t>(2, total / (8 * pool.size()));
  grain = (grain + 15) / 16 * 16;
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
