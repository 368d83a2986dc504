// packed_gemm.cu — y = x · wᵀ for many rows over a packed weight matrix (packed_gemm.h):
// each block decodes a 64-row x 32-value tile of w through the format's reader
// (weight_readers.cuh) into shared memory as the compute type, copies the matching 128 x
// 32 tile of x beside it (cp.async), and its 8 warps multiply them on tensor cores
// (ldmatrix + mma.sync m16n8k16, sm_80 and up: H100 and GB10 alike), each warp 32 rows x
// 32 columns of the 128 x 64 output tile.
//
// Bytes, Llama-3.1-8B in Q4_K_M (7.5e9 weights in the layers, 4.6 GB packed), a prefill
// step of T tokens. Dequantizing each matrix into a 16-bit scratch for cuBLASLt (the
// previous path) wrote 2 bytes a weight and read them back: ~30 GB a step whatever T,
// ~140 ms on GB10 (~218 GB/s), ~10 ms on H100 (~3.0 TB/s). Here the packed bytes are read
// from DRAM about once a step: blockIdx.x walks the row tiles fastest, so the blocks
// resident together share a weight tile and the later ones find it in L2; x (T x 4096 x 2
// bytes, 16 MB at T = 2048) is re-read per column block, mostly from L2. 4.6 GB: ~21 ms on
// GB10. Compute: 2 x 7.5e9 x T FLOPs, T = 512: 7.7 TFLOP, ~84 ms at GB10's ~92 TFLOPS
// dense BF16, so on GB10 the copy cost more than the multiply up to T ≈ 800 and this
// path is compute-bound. On H100 this kernel's mma rate (no pipelining of the weight
// tiles yet, below) stays under cuBLASLt's, which there outweighs the ~10 ms copy at
// long prefills; the rule is that no full 16-bit copy is made.
//
// Instructions. A 32-value step of a block: 2 x 128 x 64 x 32 = 524k FLOPs (64 mma a
// warp) against 2,048 weights decoded (~5 lane operations each, 10k) and 768 16-byte
// shared stores and loads: decoding is ~2% of the tensor-core time. Loads in flight: x's
// tile by cp.async (16 bytes a copy, 2 a thread), the weights through registers, so one
// block waits for its loads while the others resident on the SM (15 KB of shared memory
// each, several an SM) run their mma. A double-buffered weight tile is the next step when
// a GPU measures the gap. Waves: T = 512, n = 4096 gives 4 x 64 = 256 blocks of 8 warps:
// 5.3 waves of one block an SM on GB10's 48 SMs, 1.9 on H100's 132.
#include <string>

#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/packed_gemm.h"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/weight_readers.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps: 4 along the rows x 2 along the columns
constexpr int kBM = 128;       // rows of x a tile
constexpr int kBN = 64;        // weight rows (output columns) a tile
constexpr int kBK = 32;        // values a step
constexpr int kStride = kBK + 8;  // shared row stride in elements: 80 bytes, so ldmatrix's 8 rows fall in distinct banks
constexpr int kTileABytes = kBM * kStride * 2, kTileBBytes = kBN * kStride * 2;

template <typename T, typename R, typename OutT>
__global__ void __launch_bounds__(kThreads)
    packed_gemm_kernel(R w, const T* __restrict__ x, int rows, int k, int n, OutT* __restrict__ y, int ldy) {
  constexpr int V = R::kValues;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sA = smem_u32(smem), sB = sA + kTileABytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = (warp & 3) * 32, wn = (warp >> 2) * 32;  // the warp's rows and columns within the tile
  const int m0 = blockIdx.x * kBM, n0 = blockIdx.y * kBN;
  float acc[2][4][4] = {};  // [16-row tile][8-column tile][mma fragment]
  wait_then_allow_next_kernel();

  for (int k0 = 0; k0 < k; k0 += kBK) {
    // x: 128 rows x 32 values, 8 a copy; zeros past the rows or k.
    for (int idx = tid; idx < kBM * kBK / 8; idx += kThreads) {
      const int m = idx / (kBK / 8), c = idx % (kBK / 8) * 8;
      const bool valid = m0 + m < rows && k0 + c < k;
      cp_async16(sA + uint32_t(m * kStride + c) * 2, x + (valid ? int64_t(m0 + m) * k + k0 + c : 0), valid);
    }
    cp_async_commit();
    // w: 64 rows x 32 values decoded by the reader, rounded to T; zeros past n or k.
    for (int idx = tid; idx < kBN * kBK / V; idx += kThreads) {
      const int r = idx / (kBK / V), c = idx % (kBK / V) * V;
      float wv[V];
      if (n0 + r < n && k0 + c < k) {
        w.decode(w.load(n0 + r, k0 + c), n0 + r, k0 + c, wv);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) wv[v] = 0.0f;
      }
#pragma unroll
      for (int h = 0; h < V / 8; ++h) {
        alignas(16) T part[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) part[j] = from_f32<T>(wv[h * 8 + j]);
        st_shared_v4(sB + uint32_t(r * kStride + c + h * 8) * 2, *reinterpret_cast<const uint4*>(part));
      }
    }
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      // A fragments of the warp's two 16-row tiles; B fragments of its four 8-column
      // tiles, two a load (matrices: columns 0-7 k lo, k hi, columns 8-15 k lo, k hi).
      uint32_t a[2][4], b[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i)
        ldsm_x4(sA + uint32_t((wm + i * 16 + (lane & 15)) * kStride + kk + (lane >> 4) * 8) * 2, a[i]);
      const int q = lane >> 3;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        ldsm_x4(sB + uint32_t((wn + j * 16 + (q >> 1) * 8 + (lane & 7)) * kStride + kk + (q & 1) * 8) * 2, b[j]);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
          mma_16816<T>(acc[i][jn], a[i][0], a[i][1], a[i][2], a[i][3], b[jn / 2][(jn % 2) * 2],
                       b[jn / 2][(jn % 2) * 2 + 1]);
    }
    __syncthreads();
  }

  // Thread (g, t) holds rows g and g + 8 of each 16-row tile, columns 2t and 2t + 1 of
  // each 8-column tile.
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + wm + i * 16 + g + half * 8;
      if (row >= rows) continue;
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = n0 + wn + jn * 8 + 2 * t + c;
          if (col < n) y[int64_t(row) * ldy + col] = from_f32<OutT>(acc[i][jn][half * 2 + c] * row_scale(w, col));
        }
    }
}

}  // namespace

void packed_gemm(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
                 int32_t ldy, GemmOut out, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(w.format != WeightFormat::HALF && w.tail == nullptr && w.data,
              "packed_gemm: w must be one packed segment");
  SPARK_CHECK(rows > 0 && n > 0 && ldy >= n && k > 0 && k % block_values(w.format) == 0 && k % 8 == 0,
              "packed_gemm: bad shape rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                  " n=" + std::to_string(n));
  SPARK_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && y != nullptr, "packed_gemm: x must be 16-byte aligned");
  SPARK_CHECK(ceil_div(n, kBN) <= 65535, "packed_gemm: n too large for the grid");
  const dim3 grid{unsigned(ceil_div(rows, kBM)), unsigned(ceil_div(n, kBN))}, block{kThreads};
  const size_t smem = kTileABytes + kTileBBytes;
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    with_weight_reader<T>(w, n, k, [&](auto reader) {
      using R = decltype(reader);
      if (out == GemmOut::F32)
        launch_kernel("packed_gemm_kernel", programmatic, packed_gemm_kernel<T, R, float>, grid, block, smem, stream,
                      reader, static_cast<const T*>(x), int(rows), int(k), int(n), static_cast<float*>(y), int(ldy));
      else
        launch_kernel("packed_gemm_kernel", programmatic, packed_gemm_kernel<T, R, T>, grid, block, smem, stream,
                      reader, static_cast<const T*>(x), int(rows), int(k), int(n), static_cast<T*>(y), int(ldy));
    });
  });
}

}  // namespace spark::cuda
