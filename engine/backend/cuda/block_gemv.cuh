// block_gemv.cuh — the decode GEMV of every packed format and the embedding gather of the
// raw-block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), written once and instantiated per
// format in its own file (q4_k.cu, q6_k.cu, ..., q8_0.cu, fp8.cu), whose header carries
// that format's byte and instruction arithmetic:
//   - gemv_rows_kernel: y = x · wᵀ for 1..8 activation rows over a row reader of
//     weight_readers.cuh (BlockRows<F>, Q8_0Rows, Fp8Rows), one warp per weight row, each
//     lane decoding its chunks in registers; every weight byte is read once.
//   - embedding_gather_blocks_kernel: token rows of a packed table widened to f32.
// Only the host launchers in block_formats.h are called from outside.
#pragma once
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/block_readers.cuh"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/weight_readers.cuh"

#include <algorithm>
#include <string>
#include <type_traits>

namespace spark::cuda {
namespace block_kernels {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Warp `warp` of block b takes weight row b * kWarps + warp; lane l takes the row's chunks
// (R::kValues values: a 32-value part of a block, or 16 Q8_0 / FP8 bytes) l, l + 32, ...,
// so a warp step covers 32 contiguous chunks (1024 values of a block format, 512 bytes of
// Q8_0 or FP8). The next chunk is requested before the current one is multiplied and
// decoded after; the first is decoded before waiting for the kernel ahead (programmatic
// launch): weights never change during a step, x does. Each chunk's dot product is summed
// on its own, then added to the row's accumulator. At most 64 registers (4 blocks an SM):
// ptxas then spills in none of the formats (left to itself it gave Q4_1 79 on sm_121 and
// FP8 a spill).
template <typename R, typename T, typename OutT>
__global__ void __launch_bounds__(kThreads, 4) gemv_rows_kernel(R w, const T* __restrict__ x, int rows, int k, int n,
                                                             OutT* __restrict__ y, int ldy) {
  constexpr int V = R::kValues;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  // A warp past n reads row n-1 and stores nothing: no branch around the loads.
  const int64_t r = row < n ? row : n - 1;
  int c = lane * V;
  float wv[V];
  if (c < k) w.decode(w.load(r, c), r, c, wv);
  grid_dependency_wait();
  allow_dependent_launch();

  float acc[kGemvMaxRows];
#pragma unroll
  for (int a = 0; a < kGemvMaxRows; ++a) acc[a] = 0.0f;
  // A reader whose load only finds the block (BlockRows: its decode reads the bytes) finds
  // the next one after the multiply, as the decode needs it.
  constexpr bool kLoadFirst = !std::is_pointer_v<typename R::Chunk>;
  for (; c < k; c += 32 * V) {
    const bool more = c + 32 * V < k;
    typename R::Chunk next{};
    if constexpr (kLoadFirst)
      if (more) next = w.load(r, c + 32 * V);
#pragma unroll
    for (int a = 0; a < kGemvMaxRows; ++a) {
      if (a < rows) {
        const uint4* xp = reinterpret_cast<const uint4*>(x + int64_t(a) * k + c);
        float dot = 0.0f;
#pragma unroll
        for (int v = 0; v < V / 8; ++v) {
          const uint4 xv = __ldg(xp + v);
          const T* xs = reinterpret_cast<const T*>(&xv);
#pragma unroll
          for (int i = 0; i < 8; ++i) dot = fmaf(wv[8 * v + i], to_f32(xs[i]), dot);
        }
        acc[a] += dot;
      }
    }
    if (more) w.decode(kLoadFirst ? next : w.load(r, c + 32 * V), r, c + 32 * V, wv);
  }
#pragma unroll
  for (int a = 0; a < kGemvMaxRows; ++a) {
    if (a < rows) {
      const float v = warp_sum(acc[a]) * row_scale(w, r);
      if (lane == 0 && row < n) y[int64_t(a) * ldy + row] = from_f32<OutT>(v);
    }
  }
}

template <WeightFormat F>
__device__ __forceinline__ void decode_part(const uint8_t* row, int part, float (&w)[32]) {
  using R = BlockReader<F>;
  BlockReader<F>::part(row + int64_t(part / R::kParts) * R::kBlockBytes, part % R::kParts, w);
}

// One thread per 32-value part of a token's row; ids outside the vocabulary give zeros.
template <WeightFormat F>
__global__ void embedding_gather_blocks_kernel(const int32_t* __restrict__ token_ids, const uint8_t* __restrict__ table,
                                               int64_t row_bytes, int64_t vocab, int hidden, int64_t parts,
                                               float* __restrict__ out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= parts) return;
  const int64_t parts_per_row = hidden / kPartValues;
  const int64_t t = i / parts_per_row;
  const int part = int(i - t * parts_per_row);
  const int64_t id = token_ids[t];
  float v[32];
  if (id >= 0 && id < vocab) {
    decode_part<F>(table + id * row_bytes, part, v);
  } else {
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = 0.0f;
  }
  float4* o = reinterpret_cast<float4*>(out + t * hidden + int64_t(part) * kPartValues);
#pragma unroll
  for (int j = 0; j < 8; ++j) o[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <WeightFormat F>
void check_shape(int32_t k, const void* w, const char* who) {
  SPARK_CHECK(w != nullptr, std::string(who) + ": no weights");
  SPARK_CHECK(k > 0 && k % BlockReader<F>::kBlockValues == 0,
              std::string(who) + ": k must be a positive multiple of " + std::to_string(BlockReader<F>::kBlockValues) +
                  " for " + weight_format_name(F) + ", got " + std::to_string(k));
}

}  // namespace block_kernels

// y[rows, n] (row stride ldy) = x[rows, k] · (the rows `w` reads)ᵀ through gemv_rows_kernel:
// the GEMV of every packed format (block formats, Q8_0, FP8). Checks what every format
// shares; the caller checks its matrix.
template <typename R>
void launch_gemv_rows(const char* who, const R& w, HalfType type, const void* x, int32_t rows, int32_t k, int32_t n,
                      void* y, int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  using namespace block_kernels;
  SPARK_CHECK(rows >= 1 && rows <= kGemvMaxRows, std::string(who) + ": rows must be 1..8, got " + std::to_string(rows));
  SPARK_CHECK(n > 0 && ldy >= n && aligned16(x) && y != nullptr,
              std::string(who) + ": bad n, ldy, x alignment or output");
  const dim3 grid{unsigned(ceil_div(n, kWarps))}, block{kThreads};
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    const auto* xt = static_cast<const T*>(x);
    if (out == GemmOut::F32)
      launch_kernel("gemv_rows_kernel", programmatic, gemv_rows_kernel<R, T, float>, grid, block, 0, stream, w, xt,
                    rows, k, n, static_cast<float*>(y), ldy);
    else
      launch_kernel("gemv_rows_kernel", programmatic, gemv_rows_kernel<R, T, T>, grid, block, 0, stream, w, xt, rows,
                    k, n, static_cast<T*>(y), ldy);
  });
}

template <WeightFormat F>
void gemv_blocks(HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n, void* y,
                 int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  block_kernels::check_shape<F>(k, w, "gemv_blocks");
  launch_gemv_rows("gemv_blocks", BlockRows<F>{static_cast<const uint8_t*>(w), block_row_bytes(F, k)}, type, x, rows,
                   k, n, y, ldy, out, stream, programmatic);
}

template <WeightFormat F>
void embedding_gather_blocks(const int32_t* token_ids, int32_t num_tokens, const void* table, int64_t vocab,
                             int32_t hidden, float* out, cudaStream_t stream) {
  using namespace block_kernels;
  check_shape<F>(hidden, table, "embedding_gather_blocks");
  SPARK_CHECK(num_tokens >= 0 && vocab > 0 && aligned16(out), "embedding_gather_blocks: bad sizes or output");
  if (num_tokens == 0) return;
  const int64_t parts = int64_t(num_tokens) * (hidden / kPartValues);
  launch_kernel("embedding_gather_blocks_kernel", false, embedding_gather_blocks_kernel<F>,
                dim3{unsigned(ceil_div(parts, 256))}, dim3{256}, 0, stream, token_ids,
                static_cast<const uint8_t*>(table), block_row_bytes(F, hidden), vocab, hidden, parts, out);
}

// The two launchers of one format, compiled in that format's file.
#define SPARK_INSTANTIATE_BLOCK_FORMAT(F)                                                                           \
  template void gemv_blocks<F>(HalfType, const void*, int32_t, int32_t, const void*, int32_t, void*, int32_t,      \
                               GemmOut, cudaStream_t, bool);                                                       \
  template void embedding_gather_blocks<F>(const int32_t*, int32_t, const void*, int64_t, int32_t, float*,         \
                                           cudaStream_t)

}  // namespace spark::cuda
