// packed_gemm.cu — y = x · wᵀ for many rows over a packed weight matrix (packed_gemm.h):
// each block decodes a BN-row x BK-value tile of w through the format's reader
// (weight_readers.cuh) into shared memory as the compute type, copies the matching BM x BK
// tile of x beside it (cp.async), and its 8 warps multiply them on tensor cores (ldmatrix +
// mma.sync m16n8k16, sm_80 and up: H100 and GB10 alike). Two families of tiles:
//
// Prefill (more than 64 rows): 128 x 128 tiles, BK 64, each warp 32 rows x 64 columns,
// two stages (below).
// Bytes, Llama-3.1-8B in Q4_K_M (7.5e9 weights in the layers, 4.6 GB packed), a prefill
// step of T tokens. Dequantizing each matrix into a 16-bit scratch for cuBLASLt (the
// previous path) wrote 2 bytes a weight and read them back: ~30 GB a step whatever T,
// ~140 ms on GB10 (~218 GB/s), ~10 ms on H100 (~3.0 TB/s). Here the packed bytes are read
// from DRAM about once a step: blockIdx.x walks the row tiles fastest, so the blocks
// resident together share a weight tile and the later ones find it in L2; x (T x 4096 x 2
// bytes, 16 MB at T = 2048) is re-read per column block, mostly from L2. 4.6 GB: ~21 ms on
// GB10. Compute: 2 x 7.5e9 x T FLOPs, T = 512: 7.7 TFLOP, ~84 ms at GB10's ~92 TFLOPS
// dense BF16, so on GB10 the copy cost more than the multiply up to T ≈ 800 and this
// path is compute-bound; the rule is that no full 16-bit copy is made.
// A 64-value step of a block: 2 x 128 x 128 x 64 = 2.1M FLOPs (128 mma a warp, each A
// fragment used 8 times and each B fragment twice) against 8,192 weights decoded, one
// chunk a thread in the 32-value formats and two in Q8_0 and FP8 (so every thread decodes;
// the 128 x 64 x 32 tile it replaces had a quarter of them decode while the rest waited
// at the barrier), ~5-11 lane operations a weight: ~10% of the tensor-core time on GB10.
// Two stages: while the warps multiply step i, step i + 1's x tile is in flight by
// cp.async into the other shared buffer and its weight chunks in registers (a K-quant's
// chunk is its block's address, read as it is decoded), decoded at the top of step i + 1;
// one barrier a step. Shared memory 2 x (128 + 128) x 72 x 2 B = 72 KB (opted in): one
// block of 8 warps an SM on GB10 (~100 KB) and, by its registers (up to 166 on sm_121 and
// 176 on sm_90, no spills), on H100; 16 KB of x and up to 8.5 KB of packed weights (Q8_0)
// in flight a block.
// Waves: T = 512, n = 4096 gives 4 x 32 = 128 blocks: 2.7 waves on GB10's 48 SMs, 1.0 on
// H100's 132 (T = 2048: 3.9).
//
// Decode buckets and verification (9..64 rows): BM = 16 (up to 16 rows) or 64 (a 32-row
// tile too would cost the GPU bundle ~0.45 MiB of code for less padding at 17..32 rows),
// BN = 128, BK = 64, so one row tile holds every row and each weight is decoded once a
// step for all of them (bytes read / packed bytes 1.00, check_blocks' byte rows). The
// 128-row tile at 16 rows did 8x the mma work on padding and, with n = 4096, gave 64
// blocks: under one per SM on H100, each with ~1.1 KB of weights in flight. Here a step
// of a block decodes 128 x 64 weights (one 32-value chunk a thread in the block formats,
// 4.6 KB of Q4_K), and split-K (blockIdx.z) gives the grid at least one block an SM:
// Llama-3.1-8B's 4096-wide projections make 32 column tiles, split 2 ways on GB10 (48
// SMs) and 5 on H100 (132). The splits write f32 partial sums (row scale applied) to the
// Gemm's scratch and a second kernel adds them: 8 bytes a row and column a split (written
// once, read once, from L2), held to at most half the weights' bytes at 4 bits a weight,
// so 64 rows x k 4096 split at most 2 ways. Little's law: GB10 needs ~218 GB/s x ~0.6 µs
// = 130 KB in flight, 2.7 KB an SM, which one block's decode step covers; H100 ~3.0 TB/s
// x ~0.7 µs = 2.1 MB, 16 KB an SM: 4 resident blocks at BM 16 (<= 64 registers, 32 warps
// an SM, 18 KB of Q4_K a step), 2 at BM 64 (<= 128 registers; make kernel-report), and
// the grid has them only where there are enough tiles: the fused gate/up (28,672 rows,
// 224 column tiles) and the split projections at 16 rows (160 blocks).
// Projected at 16 rows, 8B Q4_K_M: ~4.6 GB a step, ~21 ms on GB10 (~760 tok/s at 16
// sequences), ~1.5 ms of weight bytes on H100; compute 2 x 7.5e9 x 16 = 0.24 TFLOP, a
// few ms at most: still bound by bytes, as the 8-row GEMV is. A GPU run must confirm.
#include <algorithm>
#include <string>
#include <type_traits>

#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/packed_gemm.h"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/weight_readers.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;

// A tile shape: BM rows of x by BN weight rows (output columns), BK values a step. Each
// warp takes MI 16-row mma tiles and NJ 8-column ones; the warps are laid kWarpsM along the
// rows and kWarpsN along the columns.
// kStages 2: the next step's x tile and weight chunks are in flight while this step's are
// multiplied (two shared buffers); 1: each step loads, then multiplies. kMinBlocks: the
// blocks an SM ptxas must leave registers for (2: at most 128 a thread).
template <int BM_, int BN_, int BK_, int kStages_, int kMinBlocks_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, kStages = kStages_, kMinBlocks = kMinBlocks_;
  static constexpr int MI = BM >= 32 ? 2 : 1;
  static constexpr int kWarpsM = BM / (16 * MI), kWarpsN = kWarps / kWarpsM;
  static constexpr int WN = BN / kWarpsN, NJ = WN / 8;
  // Shared row stride in elements: BK + 8, so ldmatrix's 8 rows fall in distinct banks.
  static constexpr int kStride = BK + 8;
  static constexpr size_t kStageBytes = size_t(BM + BN) * kStride * 2;
  static constexpr size_t kSmem = kStageBytes * kStages;
  static_assert(kWarpsM * kWarpsN == kWarps && NJ % 2 == 0 && BK % 16 == 0);
};
// The prefill tile's 72 KB of shared memory allow one block an SM on GB10 and two on
// H100, where holding it to 128 registers (from up to 176 on sm_90) spills; so one.
using PrefillTile = Tile<128, 128, 64, 2, 1>;
template <int BM>
using DecodeTile = Tile<BM, 128, 64, 1, 2>;

// Block (x, y, z) computes rows x * BM.., columns y * BN.. over steps z * steps_per_split..
// of k. Without partials it writes y; with them, split z's f32 sums (row scale applied) go
// to partials[z][row][col], which split_sum_kernel adds.
template <typename Tl, typename T, typename R, typename OutT>
__global__ void __launch_bounds__(kThreads, Tl::kMinBlocks)
    packed_gemm_kernel(R w, const T* __restrict__ x, int rows, int k, int n, int steps_per_split,
                       OutT* __restrict__ y, int ldy, float* __restrict__ partials) {
  constexpr int BM = Tl::BM, BN = Tl::BN, BK = Tl::BK, S = Tl::kStride, V = R::kValues;
  constexpr int kChunks = BN * BK / V;  // weight chunks a step
  constexpr int kPerThread = (kChunks + kThreads - 1) / kThreads;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t s0 = smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // The warp's rows and columns within the tile.
  const int wm = (warp % Tl::kWarpsM) * 16 * Tl::MI, wn = (warp / Tl::kWarpsM) * Tl::WN;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int k_begin = blockIdx.z * steps_per_split * BK, k_end = min(k, k_begin + steps_per_split * BK);
  float acc[Tl::MI][Tl::NJ][4] = {};  // [16-row tile][8-column tile][mma fragment]
  wait_then_allow_next_kernel();

  // x: BM rows x BK values of step k0 into stage `st` by cp.async, 8 a copy; zeros past
  // the rows or the split's end.
  auto copy_x = [&](int k0, int st) {
    const uint32_t sA = s0 + uint32_t(st * Tl::kStageBytes);
    for (int idx = tid; idx < BM * BK / 8; idx += kThreads) {
      const int m = idx / (BK / 8), c = idx % (BK / 8) * 8;
      const bool valid = m0 + m < rows && k0 + c < k_end;
      cp_async16(sA + uint32_t(m * S + c) * 2, x + (valid ? int64_t(m0 + m) * k + k0 + c : 0), valid);
    }
    cp_async_commit();
  };
  // w: the thread's chunks of step k0 (BN rows x BK values), loaded into `raw`, then decoded
  // by the reader into stage `st`, rounded to T; zeros past n or the split's end.
  typename R::Chunk raw[kPerThread] = {};
  auto load_w = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int idx = tid + i * kThreads, r = idx / (BK / V), c = idx % (BK / V) * V;
      if (idx < kChunks && n0 + r < n && k0 + c < k_end) raw[i] = w.load(n0 + r, k0 + c);
    }
  };
  auto decode_w = [&](int k0, int st) {
    const uint32_t sB = s0 + uint32_t(st * Tl::kStageBytes + BM * S * 2);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int idx = tid + i * kThreads, r = idx / (BK / V), c = idx % (BK / V) * V;
      if (idx >= kChunks) continue;
      float wv[V];
      if (n0 + r < n && k0 + c < k_end) {
        w.decode(raw[i], n0 + r, k0 + c, wv);
      } else {
#pragma unroll
        for (int v = 0; v < V; ++v) wv[v] = 0.0f;
      }
#pragma unroll
      for (int h = 0; h < V / 8; ++h) {
        alignas(16) T part[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) part[j] = from_f32<T>(wv[h * 8 + j]);
        st_shared_v4(sB + uint32_t(r * S + c + h * 8) * 2, *reinterpret_cast<const uint4*>(part));
      }
    }
  };

  // Two stages: step k0's tiles were issued during the step before (x by cp.async into this
  // stage, w into `raw`); they are decoded and waited for, one barrier, and step k0 + BK's
  // are issued into the other stage before the multiply. Stage st's x was last read two
  // steps ago and its w likewise, both before the last barrier. One stage: load, barrier,
  // multiply, barrier.
  if constexpr (Tl::kStages == 2) {
    copy_x(k_begin, 0);
    load_w(k_begin);
  }
  for (int k0 = k_begin, st = 0; k0 < k_end; k0 += BK, st ^= Tl::kStages - 1) {
    if constexpr (Tl::kStages == 1) {
      copy_x(k0, 0);
      load_w(k0);
    }
    decode_w(k0, st);
    cp_async_wait<0>();
    __syncthreads();
    if constexpr (Tl::kStages == 2) {
      if (k0 + BK < k_end) {
        copy_x(k0 + BK, st ^ 1);
        load_w(k0 + BK);
      }
    }
    const uint32_t sA = s0 + uint32_t(st * Tl::kStageBytes), sB = sA + uint32_t(BM * S * 2);
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      // A fragments of the warp's 16-row tiles; B fragments of its 8-column tiles, two a
      // load (matrices: columns 0-7 k lo, k hi, columns 8-15 k lo, k hi).
      uint32_t a[Tl::MI][4], b[Tl::NJ / 2][4];
#pragma unroll
      for (int i = 0; i < Tl::MI; ++i)
        ldsm_x4(sA + uint32_t((wm + i * 16 + (lane & 15)) * S + kk + (lane >> 4) * 8) * 2, a[i]);
      const int q = lane >> 3;
#pragma unroll
      for (int j = 0; j < Tl::NJ / 2; ++j)
        ldsm_x4(sB + uint32_t((wn + j * 16 + (q >> 1) * 8 + (lane & 7)) * S + kk + (q & 1) * 8) * 2, b[j]);
#pragma unroll
      for (int i = 0; i < Tl::MI; ++i)
#pragma unroll
        for (int jn = 0; jn < Tl::NJ; ++jn)
          mma_16816<T>(acc[i][jn], a[i][0], a[i][1], a[i][2], a[i][3], b[jn / 2][(jn % 2) * 2],
                       b[jn / 2][(jn % 2) * 2 + 1]);
    }
    if constexpr (Tl::kStages == 1) __syncthreads();
  }

  // Thread (g, t) holds rows g and g + 8 of each 16-row tile, columns 2t and 2t + 1 of
  // each 8-column tile.
  const int g = lane >> 2, t = lane & 3;
  float* part = partials ? partials + int64_t(blockIdx.z) * rows * n : nullptr;
#pragma unroll
  for (int i = 0; i < Tl::MI; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = m0 + wm + i * 16 + g + half * 8;
      if (row >= rows) continue;
#pragma unroll
      for (int jn = 0; jn < Tl::NJ; ++jn)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = n0 + wn + jn * 8 + 2 * t + c;
          if (col >= n) continue;
          const float v = acc[i][jn][half * 2 + c] * row_scale(w, col);
          if (part)
            part[int64_t(row) * n + col] = v;
          else
            y[int64_t(row) * ldy + col] = from_f32<OutT>(v);
        }
    }
}

// y[row, col] = the sum of the splits' partial sums, in order (the same result every run).
template <typename OutT>
__global__ void split_sum_kernel(const float* __restrict__ partials, int splits, int rows, int n,
                                 OutT* __restrict__ y, int ldy) {
  wait_then_allow_next_kernel();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, count = int64_t(rows) * n;
  if (i >= count) return;
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum += __ldg(partials + s * count + i);
  y[i / n * ldy + i % n] = from_f32<OutT>(sum);
}

// Splits of k for tile Tl: enough for one block an SM, each split at least 4 steps, and
// the partial sums' 8 bytes a row and column a split at most half the weights' bytes at 4
// bits a weight (k / 2 bytes a column): splits <= k / (32 rows). Each split takes
// ceil(steps / splits) steps, so none is left empty.
template <typename Tl>
int tile_splits(int32_t rows, int32_t k, int32_t n, const PackedScratch& scratch) {
  const int64_t tiles = ceil_div(int64_t(rows), int64_t(Tl::BM)) * ceil_div(int64_t(n), int64_t(Tl::BN));
  const int64_t steps = ceil_div(int64_t(k), int64_t(Tl::BK));
  if (scratch.data == nullptr || tiles >= scratch.sms) return 1;
  int64_t splits = ceil_div(int64_t(scratch.sms), tiles);
  splits = std::min<int64_t>(splits, steps / 4);
  splits = std::min<int64_t>(splits, k / (32 * int64_t(rows)));
  splits = std::min<int64_t>(splits, int64_t(scratch.bytes / (size_t(rows) * size_t(n) * sizeof(float))));
  if (splits <= 1) return 1;
  return int(ceil_div(steps, ceil_div(steps, splits)));
}

template <typename Tl, typename T, typename R, typename OutT>
void launch_tiles(const R& reader, const T* x, int32_t rows, int32_t k, int32_t n, OutT* y, int32_t ldy,
                  const PackedScratch& scratch, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(ceil_div(n, Tl::BN) <= 65535, "packed_gemm: n too large for the grid");
  const int splits = tile_splits<Tl>(rows, k, n, scratch), per_split = int(ceil_div(ceil_div(k, Tl::BK), splits));
  const dim3 grid{unsigned(ceil_div(rows, Tl::BM)), unsigned(ceil_div(n, Tl::BN)), unsigned(splits)};
  float* partials = splits > 1 ? static_cast<float*>(scratch.data) : nullptr;
  if constexpr (Tl::kSmem > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(packed_gemm_kernel<Tl, T, R, OutT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(Tl::kSmem)));
  launch_kernel("packed_gemm_kernel", programmatic, packed_gemm_kernel<Tl, T, R, OutT>, grid, dim3{kThreads},
                Tl::kSmem, stream, reader, x, int(rows), int(k), int(n), per_split, y, int(ldy), partials);
  if (splits > 1)
    launch_kernel("split_sum_kernel", programmatic, split_sum_kernel<OutT>,
                  dim3{unsigned(ceil_div(int64_t(rows) * n, int64_t(256)))}, dim3{256}, 0, stream,
                  static_cast<const float*>(partials), splits, int(rows), int(n), y, int(ldy));
}

// The tile a row count takes: `f` called with a Tile type. MXFP4 is an expert format only
// (never a dense matrix: DeviceWeights), so its rows take the prefill tile alone.
template <typename R, typename F>
void with_tile(int32_t rows, F&& f) {
  if constexpr (std::is_same_v<R, Mxfp4Rows>)
    f(PrefillTile{});
  else if (rows <= 16)
    f(DecodeTile<16>{});
  else if (rows <= 64)
    f(DecodeTile<64>{});
  else
    f(PrefillTile{});
}

}  // namespace

int packed_gemm_splits(int32_t rows, int32_t k, int32_t n, const PackedScratch& scratch) {
  int splits = 1;
  with_tile<void>(rows, [&](auto tile) { splits = tile_splits<decltype(tile)>(rows, k, n, scratch); });
  return splits;
}

void packed_gemm(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
                 int32_t ldy, GemmOut out, const PackedScratch& scratch, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(w.format != WeightFormat::HALF && w.tail == nullptr && w.data,
              "packed_gemm: w must be one packed segment");
  SPARK_CHECK(rows > 0 && n > 0 && ldy >= n && k > 0 && k % block_values(w.format) == 0 && k % 8 == 0,
              "packed_gemm: bad shape rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                  " n=" + std::to_string(n));
  SPARK_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && y != nullptr, "packed_gemm: x must be 16-byte aligned");
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    with_weight_reader<T>(w, n, k, [&](auto reader) {
      const auto run = [&](auto* yt) {
        with_tile<decltype(reader)>(rows, [&](auto tile) {
          launch_tiles<decltype(tile)>(reader, static_cast<const T*>(x), rows, k, n, yt, ldy, scratch, stream,
                                       programmatic);
        });
      };
      if (out == GemmOut::F32)
        run(static_cast<float*>(y));
      else
        run(static_cast<T*>(y));
    });
  });
}

}  // namespace spark::cuda
