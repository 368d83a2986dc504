// gemv.cu — the small-batch linear layer (gemv.h), for either 16-bit type T (bf16 or
// f16: one template, the mma picks the matching tensor-core instruction).
//
// Bytes first: w is n·k·2 bytes and must cross the memory bus once; x (at most 8 rows) and
// y are noise beside it. The FLOPs are 2·rows·n·k: at 8 rows on CUDA cores (16-bit -> f32
// converts plus FMAs) they would cost about half the memory time on an H100, so the
// multiply runs on the tensor cores instead (mma.sync m16n8k16, available on sm_80 and up,
// sm_90 and sm_121 included) and the SM's issue slots stay free for loads.
//
// Layout: one warp computes a 16-row tile of y's columns (16 weight rows) for all
// activation rows at once: the mma's A is the weight tile (16 x 16 k), B the activation
// rows (16 k x 8, rows past `rows` zero), C the 16 x 8 partial sums in f32. A dot product
// does not care in which order k is summed, so each lane loads 16 contiguous bytes (8 k)
// of its weight rows straight from global memory into the A fragment and the matching 16
// bytes of its activation row into the B fragment, with no shuffles or shared-memory
// staging: within one 32-wide k step, lane (g, t) holds k = 8t..8t+7 of weight rows g and
// g+8 and of activation row g; the first mma takes elements 0..3 of each, the second 4..7
// (PTX fragment layout: lane holds logical k 2t, 2t+1, 2t+8, 2t+9; we map them to
// physical k 8t+0..3 for the first mma and 8t+4..7 for the second — the same map for A
// and B, so the sum is unchanged).
//
// Bandwidth: per iteration a lane issues kUnroll x 2 independent 16-byte weight loads
// (128 bytes, 4 KiB per warp) before the first mma. When n is too small to give every SM
// enough warps (e.g. n = 4096 gives only 256 tiles), the warps of a block split k among
// themselves (ksplit) and add their partial tiles through shared memory.
//
// Overlap: launched programmatically (gemv.h), the kernel's blocks start while the small
// kernel before it (a norm, SwiGLU, the attention combine) still runs, and their first
// weight loads hide that kernel and the launch gap behind the weight stream.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/ptx.cuh"


namespace spark::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 16;             // weight rows per warp tile: the mma's m
constexpr int kStepK = 32;                // k per lane-group step: 4 lanes x 8 values (two mma k=16)
constexpr int kUnroll = 4;                // steps per iteration: 8 loads of 16 bytes in flight per lane
constexpr int kChunk = kStepK * kUnroll;  // k per iteration (128: 256 contiguous bytes per weight row)
// Warps per SM the k-split aims for. Little's law on an H100 (~3.3 TB/s x ~0.8 us latency
// / 132 SMs) asks for ~20 KiB in flight per SM; 16 warps x 4 KiB gives about 3x that.
constexpr int kTargetWarpsPerSm = 16;

// Weights are read exactly once: keep them out of L1 so the activation rows stay there.
// volatile: the tail's guarded loads must never be speculated past their bounds check.
__device__ __forceinline__ uint4 load_weights(const void* p) { return ld_global_nc_na_v4(p); }

__device__ __forceinline__ uint4 load_activations(const void* p) { return __ldg(static_cast<const uint4*>(p)); }

// One 32-wide k step: lo/hi hold 8 k of weight rows g and g+8, xv the same 8 k of activation row g.
template <typename T>
__device__ __forceinline__ void step(float (&c)[4], const uint4& lo, const uint4& hi, const uint4& xv) {
  mma_16816<T>(c, lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
  mma_16816<T>(c, lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
}

// One iteration's data: 8 k of weight rows g / g+8 and of activation row g, per 32-wide step.
struct Chunk {
  uint4 lo[kUnroll], hi[kUnroll], xv[kUnroll];
};

// Block: kWarps warps = (kWarps / ksplit) tiles x ksplit k-parts; the warps of one tile are
// adjacent, part 0 first. Part p takes the 128-wide chunks p, p + ksplit, ... so the
// parts of a tile read neighbouring bytes of the same rows at the same time.
// Two blocks (16 warps) per SM at most 128 registers a thread; the double buffer needs ~120.
// T: the 16-bit type of x and w; OutT: T or float.
template <typename T, typename OutT>
__global__ void __launch_bounds__(kThreads, kTargetWarpsPerSm / kWarps)
    gemv_kernel(const T* __restrict__ x, int rows, int k, const T* __restrict__ w, int n, OutT* __restrict__ y,
                int ksplit) {
  __shared__ float partial[kWarps][4][32];  // [warp][accumulator][lane]: conflict-free

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int part = warp % ksplit;
  const int64_t tile = int64_t(blockIdx.x) * (kWarps / ksplit) + warp / ksplit;
  const int64_t row0 = tile * kTileRows;

  // The last tile's rows past n re-read row n-1 and are never stored: no per-row branch
  // in the loop. (A warp with no tile at all, row0 >= n, computes addresses it never uses.)
  const int64_t last = n - 1;
  const int64_t r_lo = row0 + g < last ? row0 + g : last, r_hi = row0 + g + 8 < last ? row0 + g + 8 : last;
  const T* w_lo = w + r_lo * k + t * 8;
  const T* w_hi = w + r_hi * k + t * 8;
  // B's columns past `rows` must be zero: those lanes load row rows-1 (valid memory, no
  // branch around the load) and select zero instead.
  const bool has_x = g < rows;
  const T* xr = x + int64_t(has_x ? g : rows - 1) * k + t * 8;
  const uint4 zero = make_uint4(0, 0, 0, 0);

  const int full = k / kChunk;
  auto load_weight_chunk = [&](Chunk& dst, int ch) {
    const int off = ch * kChunk;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      dst.lo[u] = load_weights(w_lo + off + u * kStepK);
      dst.hi[u] = load_weights(w_hi + off + u * kStepK);
    }
  };
  auto load_x_chunk = [&](Chunk& dst, int ch) {
    const int off = ch * kChunk;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint4 v = load_activations(xr + off + u * kStepK);
      dst.xv[u] = has_x ? v : zero;
    }
  };
  auto multiply = [&](const Chunk& src, float(&acc)[4]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) step<T>(acc, src.lo[u], src.hi[u], src.xv[u]);
  };

  // The weights never change during a step, so a launch that may overlap the kernel
  // before it (programmatic, gemv.h) requests its first chunk of them at once and waits
  // for that kernel only before it reads x, which that kernel writes.
  const bool warp_streams = row0 < n && part < full;  // warp-uniform: the mma needs the whole warp
  Chunk cur;
  if (warp_streams) load_weight_chunk(cur, part);
  grid_dependency_wait();
  allow_dependent_launch();

  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (warp_streams) {
    // Double-buffered: chunk ch+ksplit is requested before chunk ch is multiplied, so a
    // lane always has a chunk's 8 weight loads in flight. (Without it ptxas sinks each load
    // to just before its mma, and only ~3 loads per lane are in flight.)
    load_x_chunk(cur, part);
    for (int ch = part + ksplit; ch < full; ch += ksplit) {
      Chunk next;
      load_weight_chunk(next, ch);
      load_x_chunk(next, ch);
      multiply(cur, c);
      cur = next;
    }
    multiply(cur, c);
  }
  if (row0 < n) {
    // The k % 128 tail, one 32-wide step at a time; k % 8 == 0, so a lane's 8 values are
    // either all inside k or all outside (then zero in both A and B).
    for (int s = full * kUnroll + part; s * kStepK < k; s += ksplit) {
      const int off = s * kStepK;
      const bool inside = off + t * 8 < k;
      uint4 lo = zero, hi = zero, xv = zero;
      if (inside) {
        lo = load_weights(w_lo + off);
        hi = load_weights(w_hi + off);
        const uint4 v = load_activations(xr + off);
        if (has_x) xv = v;
      }
      step<T>(c, lo, hi, xv);
    }
  }

  if (ksplit > 1) {  // block-uniform
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][i][lane] = c[i];
    __syncthreads();
    if (part != 0) return;
    for (int p = 1; p < ksplit; ++p) {
#pragma unroll
      for (int i = 0; i < 4; ++i) c[i] += partial[warp + p][i][lane];
    }
  }
  if (row0 >= n) return;

  // C fragment: c0, c1 = (weight row g; activation rows 2t, 2t+1), c2, c3 = the same for row g+8.
  const int64_t col_lo = row0 + g, col_hi = row0 + g + 8;
  const int a0 = 2 * t, a1 = 2 * t + 1;
  if (a0 < rows) {
    if (col_lo < n) y[int64_t(a0) * n + col_lo] = from_f32<OutT>(c[0]);
    if (col_hi < n) y[int64_t(a0) * n + col_hi] = from_f32<OutT>(c[2]);
  }
  if (a1 < rows) {
    if (col_lo < n) y[int64_t(a1) * n + col_lo] = from_f32<OutT>(c[1]);
    if (col_hi < n) y[int64_t(a1) * n + col_hi] = from_f32<OutT>(c[3]);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void gemv(HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n, void* y, GemmOut out,
          cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(rows >= 1 && rows <= kGemvMaxRows, "gemv: rows must be 1..8, got " + std::to_string(rows));
  SPARK_CHECK(k > 0 && k % 8 == 0, "gemv: k must be a positive multiple of 8, got " + std::to_string(k));
  SPARK_CHECK(n > 0, "gemv: n must be positive");
  SPARK_CHECK(aligned16(x) && aligned16(w), "gemv: x and w must be 16-byte aligned");
  SPARK_CHECK(y != nullptr, "gemv: null output");

  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));

  // Split k among the warps of a block only while the tiles alone leave SMs short of
  // warps, and never so far that a part gets no full 128-wide chunk.
  const int64_t tiles = ceil_div(n, kTileRows);
  const int64_t want_warps = int64_t(sms) * kTargetWarpsPerSm;
  int ksplit = 1;
  while (ksplit < kWarps && tiles * ksplit < want_warps && k >= 2 * ksplit * kChunk) ksplit *= 2;
  const int64_t blocks = ceil_div(tiles, kWarps / ksplit);

  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    const auto* xt = static_cast<const T*>(x);
    const auto* wt = static_cast<const T*>(w);
    const dim3 grid{unsigned(blocks)}, block{kThreads};
    if (out == GemmOut::F32)
      launch_kernel("gemv_kernel", programmatic, gemv_kernel<T, float>, grid, block, 0, stream, xt, rows, k, wt, n,
                    static_cast<float*>(y), ksplit);
    else
      launch_kernel("gemv_kernel", programmatic, gemv_kernel<T, T>, grid, block, 0, stream, xt, rows, k, wt, n,
                    static_cast<T*>(y), ksplit);
  });
}

}  // namespace spark::cuda
