// moe_gemm.cu — the prefill path of the experts (moe_experts.h): one grouped GEMM launch
// over every expert's tile of grouped rows, on tensor cores (mma.sync m16n8k16, sm_80 and
// up: H100 and GB10 alike), SwiGLU (or the ungated squared ReLU) fused into the gate/up
// epilogue.
//
// Work: a prefill of T tokens on Qwen3-30B-A3B does 2 x T x 8 x 3 x 768 x 2048 FLOPs a
// layer (T = 4096: 0.62 TFLOP, ~7 ms at GB10's ~92 TFLOPS dense BF16) and reads every
// selected expert from DRAM once a step (128 experts x 9.4 MB BF16 = 1.2 GB, ~5.5 ms at
// 218 GB/s; check_moe's prefill byte rows): near balance. A weight tile is read by each
// 64-row tile of its expert, but those blocks are launched within a few dozen of each
// other (the column blocks walk fastest), so the later ones find it in L2.
// FP8 experts (4.72 MB each incl. their 128x128 block scales, moe_gemv.cu) halve the
// bytes: 604 MB a layer, ~2.8 ms on GB10 and ~0.2 ms on H100 (132 SMs, ~3.0 TB/s), so
// prefill is compute-bound there; the e4m3 values are decoded to the compute type as they
// are staged (16 a thread a k step), not multiplied on FP8 tensor cores.
// MXFP4 experts (gpt-oss-20b: 32 experts of 3 x 2880 x 2880 values, 13.2 MB each) are
// decoded 32 values (one block) a thread a k step: a prefill of T = 4096 tokens does
// 2 x 4096 x 4 x 3 x 2880^2 = 0.82 TFLOP a layer (~9 ms at GB10's ~92 TFLOPS, ~1 ms on
// H100) and reads the 423 MB of experts (~1.9 ms at 218 GB/s): compute-bound. 4096 x 4 /
// 32 = 512 rows an expert make 8 tiles, 256 in all, times 23 column blocks of 128 for down
// (45 of 64 for gate/up): 5,888 (11,520) blocks, at 3 blocks of 4 warps an SM 41 (80)
// waves on GB10's 48 SMs, 15 (29) at 3 an SM on H100's 132.
// Tiles: blockIdx.y walks the tiles of all experts (MoeGroups::tile_offsets; the grid is
// sized for the worst case, pairs / 64 + experts, and blocks past the step's tiles exit),
// blockIdx.x the output columns. A block of 4 warps stages a 64-row slice of the grouped
// activations (gathered by token for gate/up) and 128 weight rows decoded to the compute
// type by the format's reader (weight_readers.cuh) in shared memory, 32 k at a time;
// each warp then multiplies its 16 rows by the 128 columns (16 mma tiles a 16-wide k step,
// fragments by ldmatrix: one x4 for the activations, eight for the weights). For gate/up
// the 128 weight rows are 64 gate rows and the same 64 up rows, so each thread holds gate
// and up of the same outputs and writes silu(gate) x up directly; ungated experts
// (Nemotron-H) take 128 up rows and write relu(up)^2, so half the column blocks of a gated
// launch. Activation tiles are re-read from L2 by every column block: 128 columns a block
// (64 before) halve those reads and the activation fragments loaded per mma.
// Tiles sized by the expert's rows: a warp whose 16 rows are all past its expert's stages
// its share and skips the multiply, so an expert with r rows costs ceil(r / 16) warps of
// mma work, not 4 (a prefill of 512 tokens on 30B-A3B averages 32 rows an expert, and many
// experts get fewer than 16). The weight staging stays whole: its bytes are the bound.
// Pipeline: two stages. While the warps multiply step i's tiles, step i + 1's are in
// flight: its 64 x 32 activations by cp.async into the other shared buffer (4 KB, two
// 16-byte copies a thread, zeros past the expert's rows) and its 128 x 32 weights as raw
// chunks in registers (BF16 8 KB, four 16-byte loads a thread; Q8_0 and FP8 4 KB plus
// scales, two; a K-quant chunk is its block's address, read as it is decoded), decoded
// into shared memory at the start of step i + 1; one barrier a step. Per block: 2 x (64 +
// 128) x 40 x 2 B = 30 KB of dynamic shared memory and 128-134 registers a thread (ptxas,
// sm_90 and sm_121; 64 of them the accumulators; 166 for BF16 and FP16 gate/up on sm_90,
// whose four raw 16-byte chunks a thread take 16), so 3 blocks an SM on GB10 (~100 KB
// shared) and 3-4 on H100 (registers): 12 KB in flight a block (next step's 8 KB of BF16
// weights and 4 KB of activations), 36-48 KB an SM against the ~5 KB (GB10: 218 GB/s x
// ~1 us / 48 SMs) to ~23 KB (H100: ~3 TB/s / 132) Little's law asks for. A 64 x 128 x 32
// step is 524k FLOPs (32 mma a warp) for 12 KB moved.
// Waves, T = 4096 on 30B-A3B (32,768 pairs, <= 640 tiles): gate/up 12 column blocks
// (7,680 blocks) is 53 waves of 3 blocks an SM on GB10's 48 SMs, 15 of 4 on H100's 132;
// down 16 column blocks (10,240 blocks) 71 and 20.
// k (hidden for gate/up, inter for down) need not be a multiple of the 32 a k step takes:
// a step past k stages zeros (cp.async's zero fill, no weight load), so LatentMoE's
// narrow latent widths (16 on the test fixture) run; a multiple of 32 costs one compare a
// chunk.
#include <algorithm>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/moe_activation.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/weight_readers.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kBM = kMoeTileRows;  // grouped rows a tile
constexpr int kBN = 128;           // weight rows a tile
constexpr int kBK = 32;
constexpr int kStride = kBK + 8;   // shared row stride in elements: 80 bytes, so the 8 rows a warp reads spread over banks

// The two stages of shared tiles: activations and weights in the compute type.
template <typename T>
struct GemmTiles {
  T a[2][kBM][kStride];
  T b[2][kBN][kStride];
};

// The tile's expert: the last e with tile_offsets[e] <= tile (an expert without rows has
// the same offset as the next one, so the last such e has rows).
__device__ __forceinline__ int tile_expert(const MoeGroups& g, int experts, int tile) {
  int lo = 0, hi = experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (g.tile_offsets[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// kGateUp: a = x [tokens, hidden] gathered by row_token, out = act [pairs, inter] (T),
//          from gate and up rows (kGated) or up rows alone.
// Else:    a = act [pairs, inter],                      out = y [pairs, hidden] (f32).
template <typename T, typename R, bool kGateUp, bool kGated>
__global__ void __launch_bounds__(kThreads, 3)  // <= 168 registers: 3 blocks an SM, as GB10's shared memory allows
    expert_gemm_kernel(R w, ExpertShape s, ExpertExtras ex, MoeGroups g, const T* __restrict__ a,
                       void* __restrict__ out) {
  constexpr int V = R::kValues;
  constexpr int kChunks = (kBN * kBK / V + kThreads - 1) / kThreads;  // weight chunks a thread loads a k step
  extern __shared__ __align__(16) uint8_t smem[];  // GemmTiles<T>: dynamic, as cp.async writes it
  auto& as = reinterpret_cast<GemmTiles<T>*>(smem)->a;
  auto& bs = reinterpret_cast<GemmTiles<T>*>(smem)->b;
  __shared__ int a_row[kBM];  // the row of `a` each tile row reads; -1 past the expert's rows
  wait_then_allow_next_kernel();
  const int tile = blockIdx.y;
  if (tile >= g.tile_offsets[s.experts]) return;
  const int e = tile_expert(g, s.experts, tile);
  const int first = g.offsets[e] + (tile - g.tile_offsets[e]) * kBM;
  const int m_rows = min(kBM, g.offsets[e + 1] - first);
  const int k = kGateUp ? s.hidden : s.inter;
  // Output columns: gated gate/up produce 32 act columns from 32 gate + 32 up rows.
  constexpr bool kPaired = kGateUp && kGated;
  const int n_out = kGateUp ? s.inter : s.hidden;
  const int col0 = blockIdx.x * (kPaired ? kBN / 2 : kBN);
  auto weight_row = [&](int n, int64_t& r) {  // false when the tile row n is past the matrix
    const int col = col0 + (kPaired ? n % (kBN / 2) : n);
    if (col >= n_out) return false;
    r = kPaired ? int64_t(e) * 2 * s.inter + (n < kBN / 2 ? 0 : s.inter) + col : int64_t(e) * n_out + col;
    return true;
  };
  for (int m = threadIdx.x; m < kBM; m += kThreads)
    a_row[m] = m < m_rows ? (kGateUp ? g.row_token[first + m] : first + m) : -1;
  __syncthreads();

  // The k step's activation tile goes to shared memory by cp.async (zeros past the
  // expert's rows); its weight chunks into registers (`raw`), decoded into shared memory at
  // the start of the step that uses them. Both are issued a step ahead, so they are in
  // flight while the previous step's tiles are multiplied.
  typename R::Chunk raw[kChunks] = {};
  auto issue = [&](int k0, int buf) {
    for (int idx = threadIdx.x; idx < kBM * kBK / 8; idx += kThreads) {
      const int m = idx / (kBK / 8), c = idx % (kBK / 8) * 8;
      const bool valid = a_row[m] >= 0 && k0 + c < k;
      cp_async16(smem_u32(&as[buf][m][c]), valid ? a + int64_t(a_row[m]) * k + k0 + c : a, valid);
    }
    cp_async_commit();
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int idx = threadIdx.x + i * kThreads, n = idx / (kBK / V), c = idx % (kBK / V) * V;
      int64_t r = 0;
      if (idx < kBN * kBK / V && k0 + c < k && weight_row(n, r)) raw[i] = w.load(r, k0 + c);
    }
  };
  auto stage_weights = [&](int k0, int buf) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int idx = threadIdx.x + i * kThreads, n = idx / (kBK / V), c = idx % (kBK / V) * V;
      if (idx >= kBN * kBK / V) continue;
      int64_t r = 0;
      float wv[V];
      if (k0 + c < k && weight_row(n, r)) w.decode(raw[i], r, k0 + c, wv);
      else
#pragma unroll
        for (int v = 0; v < V; ++v) wv[v] = 0.0f;
#pragma unroll
      for (int h = 0; h < V / 8; ++h) {
        float part[8];
#pragma unroll
        for (int v = 0; v < 8; ++v) part[v] = wv[h * 8 + v];
        store8(&bs[buf][n][c + h * 8], part);
      }
    }
  };

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gq = lane >> 2, t = lane & 3;
  // A warp whose 16 rows are all past the expert's stages its share of the tiles and skips
  // the multiply: a tile of an expert with r rows does ceil(r / 16) warps' mma work.
  const bool busy = warp * 16 < m_rows;
  const uint32_t a_base = smem_u32(&as[0][0][0]), b_base = smem_u32(&bs[0][0][0]);
  constexpr uint32_t kStageA = kBM * kStride * sizeof(T), kStageB = kBN * kStride * sizeof(T);
  float acc[kBN / 8][4] = {};
  issue(0, 0);
  for (int k0 = 0, buf = 0; k0 < k; k0 += kBK, buf ^= 1) {
    // bs[buf] and as[buf] were last read two steps ago, before the barrier of the last step.
    stage_weights(k0, buf);
    cp_async_wait<0>();
    __syncthreads();  // this step's tiles are in shared memory; every warp is done with the last step's
    if (k0 + kBK < k) issue(k0 + kBK, buf ^ 1);
    if (!busy) continue;
    // Fragments by ldmatrix (one x4 for the warp's 16 x 16 of activations, one a 16 weight
    // rows), as packed_gemm.cu reads them: 80-byte rows put its 8 row addresses in 8 bank groups.
    const uint32_t sa = a_base + buf * kStageA, sb = b_base + buf * kStageB;
    const int q = lane >> 3;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t a[4];
      ldsm_x4(sa + uint32_t((warp * 16 + (lane & 15)) * kStride + kk + (lane >> 4) * 8) * sizeof(T), a);
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j) {
        uint32_t b[4];
        ldsm_x4(sb + uint32_t((j * 16 + (q >> 1) * 8 + (lane & 7)) * kStride + kk + (q & 1) * 8) * sizeof(T), b);
        mma_16816<T>(acc[2 * j], a[0], a[1], a[2], a[3], b[0], b[1]);
        mma_16816<T>(acc[2 * j + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
      }
    }
  }

  // Thread (gq, t) holds rows warp*16 + gq (acc[.][0..1]) and + 8 (acc[.][2..3]), columns j*8 + 2t, +1.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int m = warp * 16 + gq + half * 8;
    if (m >= m_rows) continue;
    const int64_t row = first + m;
    if constexpr (kGateUp && !kGated) {
      T* act = static_cast<T*>(out);
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = col0 + j * 8 + 2 * t + c;
          const int64_t up_r = int64_t(e) * s.inter + col;
          if (col < n_out)
            act[row * n_out + col] = from_f32<T>(expert_relu2(ex, up_r, acc[j][half * 2 + c] * row_scale(w, up_r)));
        }
    } else if constexpr (kGateUp) {
      T* act = static_cast<T*>(out);
#pragma unroll
      for (int j = 0; j < kBN / 16; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = col0 + j * 8 + 2 * t + c;
          if (col >= n_out) continue;
          const int64_t gate_r = int64_t(e) * 2 * s.inter + col;
          const float gate = acc[j][half * 2 + c] * row_scale(w, gate_r);
          const float up = acc[j + kBN / 16][half * 2 + c] * row_scale(w, gate_r + s.inter);
          act[row * n_out + col] = from_f32<T>(expert_swiglu(ex, gate_r, gate_r + s.inter, gate, up));
        }
    } else {
      float* y = static_cast<float*>(out);
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int col = col0 + j * 8 + 2 * t + c;
          const int64_t down_r = int64_t(e) * s.hidden + col;
          if (col < n_out) y[row * n_out + col] = expert_down_out(ex, down_r, acc[j][half * 2 + c] * row_scale(w, down_r));
        }
    }
  }
}

// The activation tile's 16-byte copies and the weight chunks stay inside a row when k is
// a multiple of 8 and of the format's chunk; hidden and inter multiples of 16 as the GEMVs ask.
template <bool kGateUp>
void launch(HalfType type, const ExpertShape& s, const ExpertWeights& ew, const MoeGroups& g, const void* a,
            int32_t max_pairs, void* out, cudaStream_t stream, bool programmatic) {
  const int32_t matrix_rows = kGateUp ? s.inter : s.hidden, k = kGateUp ? s.hidden : s.inter;
  const int32_t max_tiles = int32_t(ceil_div(max_pairs, kBM)) + std::min(s.experts, max_pairs);
  const bool paired = kGateUp && s.gated;
  const dim3 grid(unsigned(ceil_div(matrix_rows, paired ? kBN / 2 : kBN)), unsigned(max_tiles));
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    with_weight_reader<T>(kGateUp ? ew.gate_up : ew.down, matrix_rows, k, [&](auto reader) {
      using R = decltype(reader);
      SPARK_CHECK(s.experts >= 1 && s.experts <= kMoeMaxExperts && s.hidden > 0 && s.inter > 0 &&
                      s.hidden % 16 == 0 && s.inter % 16 == 0 && k % R::kValues == 0 && max_pairs >= 1,
                  "moe grouped GEMM: hidden and inter must be positive multiples of 16 and of the weight format's " +
                      std::to_string(R::kValues) + "-value chunks, experts 1..256");
      const auto kernel = !kGateUp  ? expert_gemm_kernel<T, R, false, true>
                          : s.gated ? expert_gemm_kernel<T, R, true, true>
                                    : expert_gemm_kernel<T, R, true, false>;
      const char* name = !kGateUp  ? "expert_gemm_kernel<down>"
                         : s.gated ? "expert_gemm_kernel<gate_up>"
                                   : "expert_gemm_kernel<up_relu2>";
      launch_kernel(name, programmatic, kernel, grid, dim3(kThreads), sizeof(GemmTiles<T>), stream, reader, s,
                    ew.extras, g, static_cast<const T*>(a), out);
    });
  });
}

}  // namespace

void moe_gate_up_gemm(HalfType type, const ExpertShape& s, const ExpertWeights& w, const MoeGroups& g,
                      const void* x, int32_t max_pairs, void* act, cudaStream_t stream, bool programmatic) {
  launch<true>(type, s, w, g, x, max_pairs, act, stream, programmatic);
}

void moe_down_gemm(HalfType type, const ExpertShape& s, const ExpertWeights& w, const MoeGroups& g,
                   const void* act, int32_t max_pairs, float* y, cudaStream_t stream, bool programmatic) {
  launch<false>(type, s, w, g, act, max_pairs, y, stream, programmatic);
}

}  // namespace spark::cuda
