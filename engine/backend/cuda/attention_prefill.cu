// attention_prefill.cu — causal (or, for encoders, bidirectional) prefill attention over the
// paged cache: FlashAttention-2 style tiles on bf16 or f16 tensor cores (mma.sync m16n8k16).
//
// Head_dim 512 (Gemma 4's global layers): a whole head's O accumulator would take 256
// registers a thread, and a 64-row CTA's Q (64 KB) with its K and V tiles (32 + 32 KB)
// overruns GB10's 99 KB. So a CTA takes 32 rows (2 warps) and DV = 256 of the value
// columns, two CTAs a head (grid x = heads x 2): O is 128 registers, as at 256, and shared
// memory is Q 32 x 512 x 2 = 32 KB + K 2 x 16 x 512 x 2 = 32 KB + V 2 x 16 x 256 x 2 = 16 KB
// = 80 KB: one CTA (2 warps) an SM on GB10, two on H100/H200 (227 KB). Both CTAs of a head
// compute the whole S = QK^T, 1.5x the head's least FLOPs (S is half of them), and read the
// same K tiles, the second mostly from L2. ptxas: 167 (sm_90) / 202 (sm_121) registers with
// a 16-bit cache, 249 / 251 with FP8 (its widening stages bytes and scales), no spills.
#include <string>
#include <type_traits>

#include "engine/backend/cuda/attention_kernels.h"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda::attn {

namespace {

constexpr unsigned kFull = 0xffffffffu;

// One CTA: BM query rows of one sequence and one q head (64, or 32 at head_dim 512);
// warp w owns rows 16w..16w+15. K/V tiles of BN keys are gathered through the block table
// into shared memory (double buffered: the next tile's copies fly while this one is
// computed). Shared rows are 16-byte chunks XOR-swizzled (see swz), so the 8 rows an
// ldmatrix phase reads land in 8 different bank groups. At head_dim 512 a CTA computes
// S over the whole head but accumulates and writes DV = 256 of the value columns (its
// half: blockIdx.x % 2), and loads only those columns of V.
template <int D>
struct PrefillCfg {
  static_assert(D == 16 || D == 32 || D == 64 || D == 128 || D == 256 || D == 512,
                "head_dim 16, 32, 64, 128, 256 or 512");
  static constexpr int BM = prefill_rows(D);
  static constexpr int NT = prefill_threads(D);
  static constexpr int DV = prefill_value_cols(D);
  static constexpr int COLS = D / DV;  // CTAs a head's rows take: 2 at 512
  // At 256 (and at 512, for its 256 value columns) the O accumulator takes 128 registers a
  // thread: 16-key tiles keep S small enough to avoid spills, and the shared memory (64 KB;
  // 80 KB at 512) fits GB10's 99 KB.
  static constexpr int BN = D <= 128 ? 64 : 16;
  static constexpr int CH = D / 8;            // 16-byte chunks per row: 2 at head_dim 16
  static constexpr int CHV = DV / 8;          // the same for the V tiles' rows
  static constexpr bool kQInRegs = D <= 128;  // at 256 the O accumulator leaves no room for Q
  static constexpr int q_bytes = BM * D * 2;
  static constexpr int tile_bytes = BN * D * 2;
  static constexpr int v_tile_bytes = BN * DV * 2;
  static constexpr int smem = q_bytes + 2 * tile_bytes + 2 * v_tile_bytes;  // Q, K[2], V[2]
  static_assert(BM == 16 * (NT / 32), "one m16 row block per warp");
  static_assert((BN * CH) % NT == 0 && (BN * CHV) % NT == 0 && (BM * CH) % NT == 0, "whole copy rounds");
  static_assert((16 * CHV) % 32 == 0, "whole output rounds: a warp writes its 16 rows");
};

// c += a (16x16 T, row) * b (16x8 T, col), f32 accumulate.
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_16816<T>(c, a[0], a[1], a[2], a[3], b0, b1);
}

// Two values as a T pair; lo in the low half: the lower column.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, f16>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// Eight e4m3 values times their row's scale, as T: the shared tiles' form of an FP8 cache.
template <typename T>
__device__ __forceinline__ uint4 widen_fp8(const uint2& raw, float scale) {
  float f[8];
  unpack8(raw, f);
  return make_uint4(pack2<T>(f[0] * scale, f[1] * scale), pack2<T>(f[2] * scale, f[3] * scale),
                    pack2<T>(f[4] * scale, f[5] * scale), pack2<T>(f[6] * scale, f[7] * scale));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][CH] tile. An
// ldmatrix phase reads one chunk of 8 consecutive rows (the first a multiple of 8); they
// are conflict-free when they fall in 8 different 16-byte slots of a 128-byte line.
// Rows of 8 or more chunks: XOR the chunk with row & 7. Narrower rows (head_dim 16 and
// 32: 2 and 4 chunks) must keep the XOR below CH or chunks would land in the next row;
// 8 / CH of them share a line, so the low row bits already pick the line offset and the
// XOR takes the next bits: (row >> log2(8 / CH)) & (CH - 1).
template <int CH>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
  if constexpr (CH >= 8) {
    return uint32_t(row * CH + (chunk ^ (row & 7))) * 16u;
  } else {
    static_assert(CH == 2 || CH == 4, "narrow rows: 2 or 4 chunks");
    constexpr int kShift = CH == 4 ? 1 : 2;
    return uint32_t(row * CH + (chunk ^ ((row >> kShift) & (CH - 1)))) * 16u;
  }
}

// T: the compute type (q, out, the shared tiles, the mma inputs); KV: the cache element
// type, T itself or Fp8Kv.
template <int D, typename T, typename KV>
__global__ void __launch_bounds__(PrefillCfg<D>::NT) prefill_kernel(const PrefillParams p) {
  static_assert(std::is_same_v<KV, T> || std::is_same_v<KV, Fp8Kv>, "the cache is T or FP8");
  constexpr bool FP8 = std::is_same_v<KV, Fp8Kv>;
  using Cfg = PrefillCfg<D>;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, CH = Cfg::CH, DV = Cfg::DV, CHV = Cfg::CHV;
  constexpr int NT = Cfg::NT;
  constexpr bool kSplitV = DV < D;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK0 = sQ + Cfg::q_bytes;
  const uint32_t sV0 = sK0 + 2 * Cfg::tile_bytes;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // mma fragment row group / column pair
  const int head = blockIdx.x / Cfg::COLS;
  const int col0 = blockIdx.x % Cfg::COLS * DV;  // the first value column this CTA writes
  const PrefillTile tile = p.tiles[blockIdx.y];
  const int seq = tile.seq, row0 = tile.row0;
  const int qs = p.query_start[seq];
  const int n = p.query_start[seq + 1] - qs;
  const int ctx = p.context_lens[seq];
  const int prefix = ctx - n;  // cached tokens before this step's rows
  const int rows = min(BM, n - row0);
  // Keys the tile's last row sees: all of the context without the causal mask.
  const int kv_end = p.causal ? prefix + row0 + rows : ctx;
  const int ntiles = (kv_end + BN - 1) / BN;
  // A sliding window: keys before the tile's first row's window are not loaded (their
  // blocks may be gone), and the tiles wholly before it are skipped.
  const int kv_begin = window_start(prefix + row0 + 1, p.window);
  const int jt0 = kv_begin / BN;
  const int kvh = head / (p.num_heads / p.num_kv_heads);
  const int64_t ld = int64_t(p.num_heads) * D;  // q / out row stride
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;
  const int lbs = p.block_size_log2;
  const int bmask = (1 << lbs) - 1;

#pragma unroll
  for (int k = 0; k < BM * CH / NT; ++k) {
    const int i = tid + k * NT, r = i / CH, c = i % CH;
    const bool valid = row0 + r < n;
    const T* src = static_cast<const T*>(p.q) + int64_t(qs + (valid ? row0 + r : 0)) * ld + int64_t(head) * D + c * 8;
    cp_async16(sQ + swz<CH>(r, c), src, valid);
  }

  auto load_kv = [&](int jt, int b) {
    const int kv0 = jt * BN;
    const uint32_t sk = sK0 + b * Cfg::tile_bytes, sv = sV0 + b * Cfg::v_tile_bytes;
    if constexpr (!FP8 && !kSplitV) {
      const T* kc = static_cast<const T*>(p.cache.k);
      const T* vc = static_cast<const T*>(p.cache.v);
#pragma unroll
      for (int k = 0; k < BN * CH / NT; ++k) {
        const int i = tid + k * NT, r = i / CH, c = i % CH;
        const int key = kv0 + r;
        const bool valid = key >= kv_begin && key < kv_end;
        int64_t hv = 0;
        if (valid) hv = ((cache_block(table, key, lbs, p.cache) << lbs) | (key & bmask)) * p.num_kv_heads + kvh;
        cp_async16(sk + swz<CH>(r, c), kc + hv * D + c * 8, valid);
        cp_async16(sv + swz<CH>(r, c), vc + hv * D + c * 8, valid);
      }
    } else if constexpr (!FP8) {
      // At 512 the K and V tiles' rows differ in width. A thread's 16 K and 8 V copies a
      // tile, unrolled whole in both places load_kv is inlined, made ~1,000 of the kernel's
      // ~3,700 instructions (sm_121); unrolled 4 deep they still fly a tile ahead of use.
      const T* kc = static_cast<const T*>(p.cache.k);
      const T* vc = static_cast<const T*>(p.cache.v);
      const auto copy = [&](const T* cache, uint32_t tile, auto chunks, int k, int col) {
        constexpr int X = decltype(chunks)::value;  // chunks a row of this tile
        const int i = tid + k * NT, r = i / X, c = i % X;
        const int key = kv0 + r;
        const bool valid = key >= kv_begin && key < kv_end;
        int64_t hv = 0;
        if (valid) hv = ((cache_block(table, key, lbs, p.cache) << lbs) | (key & bmask)) * p.num_kv_heads + kvh;
        cp_async16(tile + swz<X>(r, c), cache + hv * D + col + c * 8, valid);
      };
#pragma unroll 4
      for (int k = 0; k < BN * CH / NT; ++k) copy(kc, sk, std::integral_constant<int, CH>{}, k, 0);
#pragma unroll 4
      for (int k = 0; k < BN * CHV / NT; ++k) copy(vc, sv, std::integral_constant<int, CHV>{}, k, col0);
    } else {
      // e4m3 cannot go through cp.async: loaded to registers, scaled, stored as T. Exact
      // for bf16 (e4m3 times a power of two fits it); for f16 too while the value stays in
      // f16's range, as it does for K and V the model computed in f16.
      const uint8_t* kc = static_cast<const uint8_t*>(p.cache.k);
      const uint8_t* vc = static_cast<const uint8_t*>(p.cache.v);
      if constexpr (!kSplitV) {
        constexpr int K = BN * CH / NT;
        uint2 kr[K], vr[K];
        float ks[K], vs[K];
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int i = tid + k * NT, r = i / CH, c = i % CH;
          const int key = kv0 + r;
          kr[k] = vr[k] = make_uint2(0, 0);
          ks[k] = vs[k] = 0.0f;
          if (key >= kv_begin && key < kv_end) {
            const int64_t hv = ((cache_block(table, key, lbs, p.cache) << lbs) | (key & bmask)) * p.num_kv_heads + kvh;
            kr[k] = __ldg(reinterpret_cast<const uint2*>(kc + hv * D + c * 8));
            vr[k] = __ldg(reinterpret_cast<const uint2*>(vc + hv * D + c * 8));
            ks[k] = fp8_scale_value(__ldg(p.cache.k_scale + hv));
            vs[k] = fp8_scale_value(__ldg(p.cache.v_scale + hv));
          }
        }
#pragma unroll
        for (int k = 0; k < K; ++k) {
          const int i = tid + k * NT, r = i / CH, c = i % CH;
          st_shared_v4(sk + swz<CH>(r, c), widen_fp8<T>(kr[k], ks[k]));
          st_shared_v4(sv + swz<CH>(r, c), widen_fp8<T>(vr[k], vs[k]));
        }
      } else {
        // At 512 a thread widens 16 K chunks and 8 V chunks a tile, R at a time: all 24 at
        // once would hold 72 registers of bytes and scales beside the 128 of O. K's two
        // rounds are a loop, not unrolled: ~700 (sm_121) to ~1,100 (sm_90) fewer instructions.
        constexpr int R = 8;
        static_assert((BN * CH / NT) % R == 0 && BN * CHV / NT == R, "whole rounds; one of V");
        const auto widen = [&](auto chunks, const uint8_t* cache, const uint8_t* scales, uint32_t tile, int k0,
                               int col) {
          constexpr int X = decltype(chunks)::value;  // chunks a row of this tile
          uint2 raw[R];
          float sc[R];
#pragma unroll
          for (int k = 0; k < R; ++k) {
            const int i = tid + (k0 + k) * NT, r = i / X, c = i % X;
            const int key = kv0 + r;
            raw[k] = make_uint2(0, 0);
            sc[k] = 0.0f;
            if (key >= kv_begin && key < kv_end) {
              const int64_t hv =
                  ((cache_block(table, key, lbs, p.cache) << lbs) | (key & bmask)) * p.num_kv_heads + kvh;
              raw[k] = __ldg(reinterpret_cast<const uint2*>(cache + hv * D + col + c * 8));
              sc[k] = fp8_scale_value(__ldg(scales + hv));
            }
          }
#pragma unroll
          for (int k = 0; k < R; ++k) {
            const int i = tid + (k0 + k) * NT, r = i / X, c = i % X;
            st_shared_v4(tile + swz<X>(r, c), widen_fp8<T>(raw[k], sc[k]));
          }
        };
#pragma unroll 1
        for (int k0 = 0; k0 < BN * CH / NT; k0 += R)
          widen(std::integral_constant<int, CH>{}, kc, p.cache.k_scale, sk, k0, 0);
        widen(std::integral_constant<int, CHV>{}, vc, p.cache.v_scale, sv, 0, col0);
      }
    }
  };

  load_kv(jt0, jt0 & 1);
  cp_async_commit();  // group 0: Q and the first K/V tile

  const int wrow = warp * 16;                                         // warp's first row in the tile
  const int lim_a = p.causal ? prefix + row0 + wrow + g + 1 : ctx;   // keys rows g, g+8 see
  const int lim_b = p.causal ? lim_a + 8 : ctx;
  const int warp_lim = p.causal ? prefix + row0 + wrow + 1 : ctx;     // keys every row of the warp sees
  const int win = p.window;
  const int lo_a = lim_a - win, lo_b = lim_b - win;                   // with a window: the first keys rows g, g+8 see
  // ldmatrix lane addresses (see the fragment layouts of mma.m16n8k16):
  const int q_r = wrow + (lane & 7) + ((lane >> 3) & 1) * 8, q_c = lane >> 4;  // A: rows 0-7/8-15, k 0-7/8-15
  const int k_r = (lane & 7) + ((lane >> 4) << 3), k_c = (lane >> 3) & 1;      // B of 2 key blocks: k 0-7/8-15
  const int v_r = (lane & 7) + (((lane >> 3) & 1) << 3), v_c = lane >> 4;      // B^T of 2 dim blocks: keys 0-7/8-15

  float o[DV / 8][4];
#pragma unroll
  for (int i = 0; i < DV / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;  // l: this thread's columns only
  uint32_t qf[Cfg::kQInRegs ? D / 16 : 1][4];
  const float sl2 = p.scale_log2;

  for (int jt = jt0; jt < ntiles; ++jt) {
    const int b = jt & 1;
    if (jt + 1 < ntiles) {
      load_kv(jt + 1, b ^ 1);  // buffer b^1 was last read in iteration jt-1, before its closing barrier
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint32_t sk = sK0 + b * Cfg::tile_bytes, sv = sV0 + b * Cfg::v_tile_bytes;
    if constexpr (Cfg::kQInRegs) {
      if (jt == jt0) {
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) ldsm_x4(sQ + swz<CH>(q_r, 2 * ks + q_c), qf[ks]);
      }
    }

    // S = Q K^T for this warp's 16 rows and the tile's BN keys.
    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
    // Whole at 256 and below; at 512 (32 steps, Q from shared memory) 8 deep, which keeps
    // ~170 (sm_90) to ~330 (sm_121) instructions out of each kernel and leaves 8 steps of
    // ldmatrix and mma to overlap.
#pragma unroll(kSplitV ? 8 : D / 16)
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t a[4];
      if constexpr (Cfg::kQInRegs) {
        a[0] = qf[ks][0], a[1] = qf[ks][1], a[2] = qf[ks][2], a[3] = qf[ks][3];
      } else {
        ldsm_x4(sQ + swz<CH>(q_r, 2 * ks + q_c), a);
      }
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t kb[4];
        ldsm_x4(sk + swz<CH>(16 * np + k_r, 2 * ks + k_c), kb);
        mma<T>(s[2 * np], a, kb[0], kb[1]);
        mma<T>(s[2 * np + 1], a, kb[2], kb[3]);
      }
    }

    const int kv0 = jt * BN;
    if (kv0 + BN > warp_lim || win > 0) {  // the tile crosses the causal edge (or the end, or a window's start)
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = kv0 + nt * 8 + 2 * t + e;
          if (key >= lim_a || (win > 0 && key < lo_a)) s[nt][e] = -INFINITY;
          if (key >= lim_b || (win > 0 && key < lo_b)) s[nt][2 + e] = -INFINITY;
        }
      }
    }

    // Online softmax in the exp2 domain; a row's max is shared by its quad (lanes 4g..4g+3).
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
      mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
      mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
    }
    mx_a = fmaxf(mx_a, __shfl_xor_sync(kFull, mx_a, 1));
    mx_a = fmaxf(mx_a, __shfl_xor_sync(kFull, mx_a, 2));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(kFull, mx_b, 1));
    mx_b = fmaxf(mx_b, __shfl_xor_sync(kFull, mx_b, 2));
    const float mn_a = fmaxf(m_a, mx_a * sl2), mn_b = fmaxf(m_b, mx_b * sl2);
    const float base_a = mn_a == -INFINITY ? 0.0f : mn_a;  // a row with nothing visible yet stays at zero
    const float base_b = mn_b == -INFINITY ? 0.0f : mn_b;
    const float al_a = exp2f(m_a - base_a), al_b = exp2f(m_b - base_b);
    m_a = mn_a;
    m_b = mn_b;
    float rs_a = 0.0f, rs_b = 0.0f;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
      s[nt][0] = exp2f(fmaf(s[nt][0], sl2, -base_a));
      s[nt][1] = exp2f(fmaf(s[nt][1], sl2, -base_a));
      s[nt][2] = exp2f(fmaf(s[nt][2], sl2, -base_b));
      s[nt][3] = exp2f(fmaf(s[nt][3], sl2, -base_b));
      rs_a += s[nt][0] + s[nt][1];
      rs_b += s[nt][2] + s[nt][3];
    }
    l_a = l_a * al_a + rs_a;
    l_b = l_b * al_b + rs_b;
#pragma unroll
    for (int dt = 0; dt < DV / 8; ++dt) {
      o[dt][0] *= al_a;
      o[dt][1] *= al_a;
      o[dt][2] *= al_b;
      o[dt][3] *= al_b;
    }

    // O += P V: the S accumulators of key blocks 2kk, 2kk+1 are exactly the A fragment of keys 16kk..16kk+15.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const uint32_t a[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]), pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < DV / 16; ++np) {
        uint32_t vb[4];
        ldsm_x4_trans(sv + swz<CHV>(16 * kk + v_r, 2 * np + v_c), vb);
        mma<T>(o[2 * np], a, vb[0], vb[1]);
        mma<T>(o[2 * np + 1], a, vb[2], vb[3]);
      }
    }
    __syncthreads();  // every warp is done with buffer b before iteration jt+1 refills it
  }

  l_a += __shfl_xor_sync(kFull, l_a, 1);
  l_a += __shfl_xor_sync(kFull, l_a, 2);
  l_b += __shfl_xor_sync(kFull, l_b, 1);
  l_b += __shfl_xor_sync(kFull, l_b, 2);
  const float inv_a = softmax_normaliser(m_a, l_a, p.sinks, head), inv_b = softmax_normaliser(m_b, l_b, p.sinks, head);
  // Stage the T output in this warp's own rows of the Q tile (no other warp reads
  // them), then write whole 16-byte chunks of the rows that exist.
#pragma unroll
  for (int dt = 0; dt < DV / 8; ++dt) {
    st_shared_b32(sQ + swz<CH>(wrow + g, dt) + 4 * t, pack2<T>(o[dt][0] * inv_a, o[dt][1] * inv_a));
    st_shared_b32(sQ + swz<CH>(wrow + g + 8, dt) + 4 * t, pack2<T>(o[dt][2] * inv_b, o[dt][3] * inv_b));
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 16 * CHV / 32; ++k) {
    const int i = lane + 32 * k, r = wrow + i / CHV, c = i % CHV;
    if (r < rows) {
      const uint4 v = ld_shared_v4(sQ + swz<CH>(r, c));
      *reinterpret_cast<uint4*>(static_cast<T*>(p.out) + int64_t(qs + row0 + r) * ld + int64_t(head) * D + col0 +
                                c * 8) = v;
    }
  }
}

using PrefillKernel = void (*)(PrefillParams);

template <typename T, typename KV>
PrefillKernel kernel_for(int head_dim) {
  switch (head_dim) {
    case 16:
      return prefill_kernel<16, T, KV>;
    case 32:
      return prefill_kernel<32, T, KV>;
    case 64:
      return prefill_kernel<64, T, KV>;
    case 128:
      return prefill_kernel<128, T, KV>;
    case 256:
      return prefill_kernel<256, T, KV>;
    case 512:
      return prefill_kernel<512, T, KV>;
    default:
      SPARK_CHECK(false, "prefill attention: unsupported head_dim " + std::to_string(head_dim));
  }
  return nullptr;
}

// Instantiates only the pairs valid_kv_for allows: (T, T) and (T, Fp8Kv).
PrefillKernel kernel_for(int head_dim, HalfType compute, KvDtype dtype) {
  SPARK_CHECK(valid_kv_for(compute, dtype), "prefill attention: the cache type does not match the compute type");
  return with_half_type(compute, [&](auto tag) {
    using T = decltype(tag);
    return dtype == KvDtype::FP8 ? kernel_for<T, Fp8Kv>(head_dim) : kernel_for<T, T>(head_dim);
  });
}

}  // namespace

size_t prefill_smem_bytes(int head_dim) {
  switch (head_dim) {
    case 16:
      return PrefillCfg<16>::smem;
    case 32:
      return PrefillCfg<32>::smem;
    case 64:
      return PrefillCfg<64>::smem;
    case 128:
      return PrefillCfg<128>::smem;
    case 256:
      return PrefillCfg<256>::smem;
    case 512:
      return PrefillCfg<512>::smem;
    default:
      SPARK_CHECK(false, "prefill attention: unsupported head_dim " + std::to_string(head_dim));
  }
  return 0;
}

void prefill_setup(int head_dim, HalfType compute, KvDtype dtype) {
  int dev = 0, optin = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const size_t need = prefill_smem_bytes(head_dim);
  if (need > size_t(optin))
    throw RuntimeError("prefill attention for head_dim " + std::to_string(head_dim) + " needs " + std::to_string(need) +
                       " bytes of shared memory per block; this GPU allows " + std::to_string(optin));
  CUDA_CHECK(cudaFuncSetAttribute(kernel_for(head_dim, compute, dtype), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(need)));
}

void launch_prefill(const PrefillParams& p, HalfType compute, KvDtype dtype, cudaStream_t stream) {
  if (p.num_tiles == 0) return;
  // x = head (and value half at 512), so the heads of one tile (sharing K/V through L2)
  // start together; the tiles come sorted by work, longest first.
  const dim3 grid(unsigned(p.num_heads * (p.head_dim / prefill_value_cols(p.head_dim))), unsigned(p.num_tiles));
  const PrefillKernel kernel = kernel_for(p.head_dim, compute, dtype);
  kernel<<<grid, prefill_threads(p.head_dim), prefill_smem_bytes(p.head_dim), stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spark::cuda::attn
