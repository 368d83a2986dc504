// fp8.cu — the FP8 (e4m3 weights, f32 block / channel / tensor scales) linear-layer
// kernels (fp8.h): a GEMV that streams the e4m3 bytes once and decodes in registers (many
// rows go through packed_gemm.h's tiles).
//
// Bytes. One byte a weight plus a 4-byte scale per 128x128 block (0.02%) or per row
// (4 / k): half of BF16. Qwen3-8B-FP8 reads ~7.6 GB a token at batch 1 (its BF16
// embedding gathered a row at a time, the BF16 LM head 1.2 GB of it), so GB10 (~218 GB/s
// measured copy) tops out near 29 tokens/s and H100 (~3.0 TB/s) near 390.
//
// Instructions. Per weight: one e4m3 -> f16 convert and one f16 -> f32 (sm_89 and later
// convert e4m3 pairs in one instruction); per weight and activation row: one x convert
// and one FMA; per 16 weights one scale load and multiply. About 2 + 2r lane operations a
// weight. GB10 streams ~218e9 weights/s against ~15e12 lane operations/s (~69 a weight):
// bandwidth-bound at every row count up to 8. H100 streams ~3.0e12 weights/s against
// ~30e12 (~10 a weight): bandwidth-bound up to 4 rows, issue-bound beyond (8 rows: ~18,
// ~1.8x the weight stream's time); cuBLASLt's FP8 tensor-core GEMM on 8-bit activations
// would take over there, as for prefill.
//
// Layout: one warp per weight row, each lane 16 e4m3 bytes a step with one 16-byte
// non-allocating load (a warp step is 512 contiguous bytes), the scale of those 16 values
// through the read-only cache (16 values never straddle a scale block: block columns are
// a multiple of 16), and the matching 16 activations of each row. As in q8_0.cu, the next
// step's weights are requested before the current step is multiplied: 512 bytes in flight
// a warp; H100 wants ~18 KB a SM (36 warps), GB10 ~3 KB (6 warps).
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/fp8.h"
#include "engine/backend/cuda/ptx.cuh"

#include <algorithm>
#include <string>

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLaneValues = 16;
constexpr int kWarpStep = 32 * kLaneValues;

// Where an FP8 matrix's scale for (row, col) lives.
struct ScaleGrid {
  const float* scales;
  int block_rows, block_cols, grid_cols;
  __device__ __forceinline__ float at(int64_t row, int64_t col) const {
    return __ldg(scales + (row / block_rows) * grid_cols + col / block_cols);
  }
};

// 16 e4m3 values (one 16-byte load) to f32, unscaled.
__device__ __forceinline__ void decode16(const uint4& q, float (&w)[kLaneValues]) {
  const uint8_t* b = reinterpret_cast<const uint8_t*>(&q);
#pragma unroll
  for (int i = 0; i < kLaneValues; ++i) w[i] = fp8_decode(b[i], 1.0f);
}

template <typename T, typename OutT>
__global__ void __launch_bounds__(kThreads) gemv_fp8_kernel(const T* __restrict__ x, int rows, int k,
                                                            const uint8_t* __restrict__ q, ScaleGrid grid, int n,
                                                            OutT* __restrict__ y, int ldy) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = int64_t(blockIdx.x) * kWarps + warp;
  // A warp past n reads row n-1 and stores nothing: no branch around the loads.
  const int64_t r = row < n ? row : n - 1;
  const uint8_t* wq = q + r * k;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  int c = lane * kLaneValues;
  uint4 qv = c < k ? ld_global_nc_na_v4(wq + c) : zero;
  grid_dependency_wait();
  allow_dependent_launch();

  float acc[kGemvMaxRows];
#pragma unroll
  for (int a = 0; a < kGemvMaxRows; ++a) acc[a] = 0.0f;
  for (; c < k; c += kWarpStep) {
    const uint4 next = c + kWarpStep < k ? ld_global_nc_na_v4(wq + c + kWarpStep) : zero;
    const float s = grid.at(r, c);
    float w[kLaneValues];
    decode16(qv, w);
#pragma unroll
    for (int a = 0; a < kGemvMaxRows; ++a) {
      if (a < rows) {
        const uint4* xp = reinterpret_cast<const uint4*>(x + int64_t(a) * k + c);
        const uint4 xv[2] = {__ldg(xp), __ldg(xp + 1)};
        const T* xs = reinterpret_cast<const T*>(xv);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kLaneValues; ++i) dot = fmaf(w[i], to_f32(xs[i]), dot);
        acc[a] = fmaf(s, dot, acc[a]);
      }
    }
    qv = next;
  }
#pragma unroll
  for (int a = 0; a < kGemvMaxRows; ++a) {
    if (a < rows) {
      const float v = warp_sum(acc[a]);
      if (lane == 0 && row < n) y[int64_t(a) * ldy + row] = from_f32<OutT>(v);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

ScaleGrid grid_of(const DeviceMatrix& w, int32_t k, const char* who) {
  SPARK_CHECK(w.format == WeightFormat::FP8 && w.data && w.scales, std::string(who) + ": not an FP8 matrix");
  SPARK_CHECK(k > 0 && k % kLaneValues == 0 && w.scale_block_rows > 0 && w.scale_block_cols > 0 &&
                  (w.scale_block_cols % kLaneValues == 0 || w.scale_block_cols >= k),
              std::string(who) + ": k and the scale block's columns must be multiples of 16");
  SPARK_CHECK(aligned16(w.data), std::string(who) + ": weights must be 16-byte aligned");
  const int grid_cols = int(ceil_div(k, w.scale_block_cols));
  return ScaleGrid{static_cast<const float*>(w.scales), w.scale_block_rows, w.scale_block_cols, grid_cols};
}

}  // namespace

void gemv_fp8(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
              int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(rows >= 1 && rows <= kGemvMaxRows, "gemv_fp8: rows must be 1..8, got " + std::to_string(rows));
  const ScaleGrid grid = grid_of(w, k, "gemv_fp8");
  SPARK_CHECK(n > 0 && ldy >= n && aligned16(x) && y != nullptr, "gemv_fp8: bad n, ldy, x alignment or output");
  const dim3 blocks{unsigned(ceil_div(n, kWarps))}, block{kThreads};
  const auto* q = static_cast<const uint8_t*>(w.data);
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    const auto* xt = static_cast<const T*>(x);
    if (out == GemmOut::F32)
      launch_kernel("gemv_fp8_kernel", programmatic, gemv_fp8_kernel<T, float>, blocks, block, 0, stream, xt, rows,
                    k, q, grid, n, static_cast<float*>(y), ldy);
    else
      launch_kernel("gemv_fp8_kernel", programmatic, gemv_fp8_kernel<T, T>, blocks, block, 0, stream, xt, rows, k,
                    q, grid, n, static_cast<T*>(y), ldy);
  });
}

size_t fp8_scale_bytes(const Tensor& t) { return size_t(t.scale_grid_rows() * t.scale_grid_cols()) * 4; }

void upload_fp8(const Tensor& t, void* data, void* scales) {
  SPARK_CHECK(t.dtype == DType::F8_E4M3 && t.scale && t.shape.size() == 2,
              "upload_fp8: " + t.name + " is not an FP8 matrix with scales");
  upload_bytes(data, t.data, t.nbytes);
  CUDA_CHECK(cudaMemcpy(scales, t.scale, fp8_scale_bytes(t), cudaMemcpyHostToDevice));
}

}  // namespace spark::cuda
