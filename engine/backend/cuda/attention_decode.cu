// attention_decode.cu — split-K decode attention (one query row per sequence) over the paged cache, and the combine of
// its partitions.
//
// A sliding-window layer (gpt-oss: 128 tokens) reads only its window: a sequence's K and V
// are 128 x 8 kv heads x 64 x 2 x 2 bytes = 262 KB a layer whatever the context (a full
// layer at 8k context: 16.8 MB), one partition (128 tokens), so the grid is sequences x
// kv heads x head chunks: 8 CTAs a sequence at batch 1 (under one wave of GB10's 48 SMs;
// the layer costs ~1.2 us of bandwidth), 512 at batch 64 (~11 a SM). Sink logits cost one
// exp2 a row and head in the final normalisation (softmax_normaliser).
//
// Head_dim 512 (Gemma 4's global layers: 32/4 heads at 31B, 16/2 at 26B-A4B, groups of 8):
// a cache row is one warp's, 16 values a lane in two 16-byte vectors (chunks j and j + 32,
// so each load instruction reads 512 contiguous bytes), and a CTA takes 4 heads
// (decode_max_group): their q and accumulators are 4 x 16 x 2 = 128 registers a lane, and
// U = 2 steps in flight (8-row chunks, 8 loads of 16 bytes a lane) add 32. ptxas: 220
// (bf16) / 224 (f16) registers on sm_121, 236 / 193 on sm_90, 177 / 185 with an FP8 cache,
// no spills: 2 CTAs (8 warps) an SM. Shared: s_red, 4 warps x 4 heads x 512 x 4 bytes =
// 32 KB, with the logits 33 KB of the 48 KB static limit (8 heads would need 64 KB). A group
// of 8 is two CTAs that read the same K/V rows at about the same time, the second mostly
// from L2: DRAM still moves the cache's 4 x 512 x 2 x 2 = 8 KB a token (31B, BF16).
#include <string>
#include <type_traits>

#include "engine/backend/cuda/attention_kernels.h"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda::attn {

namespace {

constexpr unsigned kFull = 0xffffffffu;

// 8 cache values per lane: 16 bytes of bf16 or f16, 8 bytes of e4m3.
template <typename KV>
using KvVec = std::conditional_t<std::is_same_v<KV, Fp8Kv>, uint2, uint4>;

template <typename KV>
__device__ __forceinline__ void unpack_kv(const KvVec<KV>& w, float (&f)[8]) {
  if constexpr (std::is_same_v<KV, Fp8Kv>)
    unpack8(w, f);  // unscaled: the caller applies the row's scale
  else
    unpack8<KV>(w, f);
}

// One CTA: one sequence, one kv head (and up to NG of the q heads sharing it), one
// partition of the context. Lanes work in groups of L = D/8 on one cache row (2 lanes at
// head_dim 16, so a warp covers 16 rows), so each K/V row is one coalesced
// 16-byte-per-lane read (8 bytes for FP8), and each row is read once for all NG heads. At
// head_dim 512 a row takes the whole warp and each lane NV = 2 vectors of 8, chunks j and
// j + 32: each load instruction is still one contiguous 512-byte read across the warp.
// The partition is walked in chunks of C rows: all loads of a chunk are issued first, the
// chunk's logits go to shared memory, one warp per head folds them into the running
// max/sum, and the rescaled P·V accumulates in registers.
// T: the type of q and out; KV: the cache element type, T itself or Fp8Kv.
template <int D, int NG, typename T, typename KV>
__global__ void __launch_bounds__(kDecodeThreads) decode_split_kernel(const DecodeParams p) {
  static_assert(std::is_same_v<KV, T> || std::is_same_v<KV, Fp8Kv>, "the cache is T or FP8");
  constexpr bool FP8 = std::is_same_v<KV, Fp8Kv>;
  static_assert(D == 16 || D == 32 || D == 64 || D == 128 || D == 256 || D == 512,
                "head_dim 16, 32, 64, 128, 256 or 512");
  static_assert(NG <= decode_max_group(D), "the heads a CTA may take at this head_dim");
  constexpr int NV = D <= 256 ? 1 : D / 256;  // 8-value vectors per lane
  constexpr int L = D / 8 / NV;               // lanes per cache row
  constexpr int RPW = 32 / L;                 // rows per warp per step
  constexpr int NW = kDecodeThreads / 32;
  constexpr int STEP = NW * RPW;  // rows per step of the CTA
  // Steps per chunk: loads in flight per lane (NV each of K and V a step). At 512 the 4
  // heads' q and acc hold 128 registers a lane; U = 2 (8 loads of 16 bytes, 32 registers)
  // keeps it at 220-236, where 256's U = 8 would need 96 more.
  constexpr int U = D > 256 ? 2 : NG <= 4 ? 8 : 4;
  constexpr int C = U * STEP;
  constexpr int XI = (C + 31) / 32;
  constexpr int HPW = (NG + NW - 1) / NW;  // heads whose softmax state one warp keeps
  using Vec = KvVec<KV>;
  using Elem = std::conditional_t<FP8, uint8_t, T>;

  // Logits and rescale factors are double-buffered by chunk parity: a warp still in the
  // P·V of chunk k reads buffer k&1 while faster warps write chunk k+1's logits.
  __shared__ float s_logit[2][NG][C];
  __shared__ float s_alpha[2][NG];
  __shared__ float s_m[NG], s_l[NG];
  __shared__ __align__(16) float s_red[NW][NG][D];

  wait_then_allow_next_kernel();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gi = lane / L, j = lane % L;
  const int slot_i = blockIdx.x;
  const int seq = p.seq_list ? p.seq_list[slot_i] : slot_i;
  const int ctx = p.context_lens[seq];
  const int group = p.num_heads / p.num_kv_heads;
  const int kvh = blockIdx.y / p.head_chunks;
  const int head0 = kvh * group + (blockIdx.y % p.head_chunks) * NG;
  const int nh = min(NG, (kvh + 1) * group - head0);  // heads of this CTA that exist
  const int64_t row_off = int64_t(p.query_start[seq]) * p.num_heads * D;
  // The partitions split the tokens the row sees: [first, ctx) (a sliding window's only).
  const int first = window_start(ctx, p.window);
  const DecodeSplit split = decode_split(ctx - first, p.parts_cap);
  const int part = blockIdx.z;
  if (split.parts == 0) {  // empty context (graph padding): the output is zeros
    if (part == 0)
      for (int i = tid; i < nh * D; i += kDecodeThreads)
        static_cast<T*>(p.out)[row_off + int64_t(head0) * D + i] = from_f32<T>(0.0f);
    return;
  }
  if (part >= split.parts) return;
  const int t_begin = first + part * split.len;
  const int t_end = min(ctx, t_begin + split.len);

  // q pre-scaled by scale * log2(e): logits come out in the exp2 domain. Vector v of a
  // lane holds the head's values at chunk j + v * L.
  float qf[NG][NV][8];
#pragma unroll
  for (int h = 0; h < NG; ++h) {
#pragma unroll
    for (int v = 0; v < NV; ++v) {
      if (h < nh) {
        const T* src = static_cast<const T*>(p.q) + row_off + int64_t(head0 + h) * D + (j + v * L) * 8;
        const uint4 w = *reinterpret_cast<const uint4*>(src);
        unpack8<T>(w, qf[h][v]);
#pragma unroll
        for (int e = 0; e < 8; ++e) qf[h][v][e] *= p.scale_log2;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) qf[h][v][e] = 0.0f;
      }
    }
  }

  const Elem* kc = static_cast<const Elem*>(p.cache.k);
  const Elem* vc = static_cast<const Elem*>(p.cache.v);
  const int32_t* table = p.block_tables + int64_t(seq) * p.max_blocks_per_seq;
  const int lbs = p.block_size_log2;
  const int bmask = (1 << lbs) - 1;

  float acc[NG][NV][8];
#pragma unroll
  for (int h = 0; h < NG; ++h)
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[h][v][e] = 0.0f;
  float run_m[HPW], run_l[HPW];
#pragma unroll
  for (int i = 0; i < HPW; ++i) run_m[i] = -INFINITY, run_l[i] = 0.0f;

  int it = 0;
  for (int c0 = t_begin; c0 < t_end; c0 += C, ++it) {
    const int buf = it & 1;
    Vec kv[U][NV], vv[U][NV];
    float ks[U], vs[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int tok = c0 + u * STEP + warp * RPW + gi;
#pragma unroll
      for (int v = 0; v < NV; ++v) kv[u][v] = vv[u][v] = Vec{};
      ks[u] = vs[u] = 0.0f;
      if (tok < t_end) {
        const int64_t slot = (cache_block(table, tok, lbs, p.cache) << lbs) | (tok & bmask);
        const int64_t hv = slot * p.num_kv_heads + kvh;
#pragma unroll
        for (int v = 0; v < NV; ++v) {
          kv[u][v] = __ldg(reinterpret_cast<const Vec*>(kc + hv * D + (j + v * L) * 8));
          vv[u][v] = __ldg(reinterpret_cast<const Vec*>(vc + hv * D + (j + v * L) * 8));
        }
        if constexpr (FP8) {
          ks[u] = fp8_scale_value(__ldg(p.cache.k_scale + hv));
          vs[u] = fp8_scale_value(__ldg(p.cache.v_scale + hv));
        }
      }
    }
    // Logits of this chunk: partial dots over each lane's 8 x NV values, summed over the L lanes of the row.
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float d[NG];
#pragma unroll
      for (int h = 0; h < NG; ++h) d[h] = 0.0f;
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        float kf[8];
        unpack_kv<KV>(kv[u][v], kf);
#pragma unroll
        for (int h = 0; h < NG; ++h)
#pragma unroll
          for (int e = 0; e < 8; ++e) d[h] = fmaf(qf[h][v][e], kf[e], d[h]);
      }
#pragma unroll
      for (int off = L / 2; off > 0; off >>= 1)
#pragma unroll
        for (int h = 0; h < NG; ++h) d[h] += __shfl_xor_sync(kFull, d[h], off);
      const int r = u * STEP + warp * RPW + gi;
      const bool valid = c0 + r < t_end;
      // Every lane of the group holds every head's sum; lane h % L writes head h (at
      // head_dim >= 64, L >= 8 >= NG: lane h; at 16 and 32 a lane writes NG / L heads).
#pragma unroll
      for (int h = 0; h < NG; ++h)
        if (j == h % L) s_logit[buf][h][r] = valid ? (FP8 ? d[h] * ks[u] : d[h]) : -INFINITY;
    }
    __syncthreads();

    // Online softmax across chunks: warp w owns heads w, w + NW, ...
#pragma unroll
    for (int hh = 0; hh < HPW; ++hh) {
      const int h = warp + hh * NW;
      if (h < NG) {
        float x[XI];
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < XI; ++i) {
          const int r = lane + 32 * i;
          x[i] = r < C ? s_logit[buf][h][r] : -INFINITY;
          mx = fmaxf(mx, x[i]);
        }
        mx = warp_max(mx);
        const float m_new = fmaxf(run_m[hh], mx);  // finite: every chunk holds a valid row
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < XI; ++i) {
          const int r = lane + 32 * i;
          const float e = exp2f(x[i] - m_new);
          if (r < C) s_logit[buf][h][r] = e;
          sum += e;
        }
        sum = warp_sum(sum);
        const float alpha = exp2f(run_m[hh] - m_new);
        run_l[hh] = run_l[hh] * alpha + sum;
        run_m[hh] = m_new;
        if (lane == 0) s_alpha[buf][h] = alpha;
      }
    }
    __syncthreads();

#pragma unroll
    for (int h = 0; h < NG; ++h) {
      const float a = s_alpha[buf][h];
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][v][e] *= a;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int r = u * STEP + warp * RPW + gi;
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        float vf[8];
        unpack_kv<KV>(vv[u][v], vf);
#pragma unroll
        for (int h = 0; h < NG; ++h) {
          float w = s_logit[buf][h][r];
          if constexpr (FP8) w *= vs[u];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[h][v][e] = fmaf(w, vf[e], acc[h][v][e]);
        }
      }
    }
  }

  // Sum the row groups of each warp, then the warps.
#pragma unroll
  for (int off = L; off < 32; off <<= 1)
#pragma unroll
    for (int h = 0; h < NG; ++h)
#pragma unroll
      for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[h][v][e] += __shfl_xor_sync(kFull, acc[h][v][e], off);
  if (gi == 0) {
#pragma unroll
    for (int h = 0; h < NG; ++h) {
#pragma unroll
      for (int v = 0; v < NV; ++v) {
        float4* dst = reinterpret_cast<float4*>(&s_red[warp][h][(j + v * L) * 8]);
        dst[0] = make_float4(acc[h][v][0], acc[h][v][1], acc[h][v][2], acc[h][v][3]);
        dst[1] = make_float4(acc[h][v][4], acc[h][v][5], acc[h][v][6], acc[h][v][7]);
      }
    }
  }
#pragma unroll
  for (int hh = 0; hh < HPW; ++hh) {
    const int h = warp + hh * NW;
    if (h < NG && lane == 0) {
      s_m[h] = run_m[hh];
      s_l[h] = run_l[hh];
    }
  }
  __syncthreads();

  const bool single = split.parts == 1;
  const int64_t part_base = (int64_t(slot_i) * p.num_heads + head0) * p.parts_cap + part;
  for (int i = tid; i < nh * D; i += kDecodeThreads) {
    const int h = i / D, d = i % D;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; ++w) s += s_red[w][h][d];
    if (single)
      static_cast<T*>(p.out)[row_off + int64_t(head0 + h) * D + d] =
          from_f32<T>(s * softmax_normaliser(s_m[h], s_l[h], p.sinks, head0 + h));
    else
      p.part_acc[(part_base + int64_t(h) * p.parts_cap) * D + d] = s;
  }
  if (!single && tid < nh) {
    p.part_m[part_base + int64_t(tid) * p.parts_cap] = s_m[tid];
    p.part_l[part_base + int64_t(tid) * p.parts_cap] = s_l[tid];
  }
}

// One CTA per (decode slot, q head): weights each partition by exp2(m_p - max) and
// normalises by the weighted sum of the partition sums. Sequences that took a single
// partition were written by the split kernel itself. T: the type of out.
template <typename T>
__global__ void __launch_bounds__(128) decode_combine_kernel(const DecodeParams p) {
  __shared__ float s_w[kMaxPartitions];
  __shared__ float s_inv;
  wait_then_allow_next_kernel();
  const int slot_i = blockIdx.x, head = blockIdx.y, tid = threadIdx.x;
  const int seq = p.seq_list ? p.seq_list[slot_i] : slot_i;
  const int ctx = p.context_lens[seq];
  const DecodeSplit split = decode_split(ctx - window_start(ctx, p.window), p.parts_cap);
  if (split.parts <= 1) return;
  const int64_t base = (int64_t(slot_i) * p.num_heads + head) * p.parts_cap;
  if (tid < 32) {
    float m = -INFINITY;
    for (int i = tid; i < split.parts; i += 32) m = fmaxf(m, p.part_m[base + i]);
    m = warp_max(m);
    float l = 0.0f;
    for (int i = tid; i < split.parts; i += 32) {
      const float w = exp2f(p.part_m[base + i] - m);
      s_w[i] = w;
      l += w * p.part_l[base + i];
    }
    l = warp_sum(l);
    if (tid == 0) s_inv = softmax_normaliser(m, l, p.sinks, head);
  }
  __syncthreads();
  const int D = p.head_dim;
  const int64_t out_off = int64_t(p.query_start[seq]) * p.num_heads * D + int64_t(head) * D;
  for (int d = tid; d < D; d += blockDim.x) {
    float s = 0.0f;
    for (int i = 0; i < split.parts; ++i) s = fmaf(s_w[i], p.part_acc[(base + i) * D + d], s);
    static_cast<T*>(p.out)[out_off + d] = from_f32<T>(s * s_inv);
  }
}

template <int D, typename T, typename KV>
void launch_split(const DecodeParams& p, int ng, dim3 grid, cudaStream_t stream, bool programmatic) {
  // Head_dim 512 has one width, 4 heads (the most it allows): Gemma 4's groups of 8 take
  // two chunks of it, a smaller group leaves some of its heads idle. The 1- and 2-head
  // widths would add ~0.45 MB of SASS (two architectures, four type pairs) to every binary.
  const auto kernel = [&] {
    if constexpr (D == 512)
      return decode_split_kernel<D, 4, T, KV>;
    else
      return ng == 1   ? decode_split_kernel<D, 1, T, KV>
             : ng == 2 ? decode_split_kernel<D, 2, T, KV>
             : ng == 4 ? decode_split_kernel<D, 4, T, KV>
                       : decode_split_kernel<D, 8, T, KV>;
  }();
  launch_kernel("decode_split_kernel", programmatic, kernel, grid, dim3(kDecodeThreads), 0, stream, p);
}

template <typename T, typename KV>
void launch_split_d(const DecodeParams& p, int ng, dim3 grid, cudaStream_t stream, bool programmatic) {
  switch (p.head_dim) {
    case 16:
      launch_split<16, T, KV>(p, ng, grid, stream, programmatic);
      break;
    case 32:
      launch_split<32, T, KV>(p, ng, grid, stream, programmatic);
      break;
    case 64:
      launch_split<64, T, KV>(p, ng, grid, stream, programmatic);
      break;
    case 128:
      launch_split<128, T, KV>(p, ng, grid, stream, programmatic);
      break;
    case 256:
      launch_split<256, T, KV>(p, ng, grid, stream, programmatic);
      break;
    case 512:
      launch_split<512, T, KV>(p, ng, grid, stream, programmatic);
      break;
    default:
      SPARK_CHECK(false, "decode attention: unsupported head_dim " + std::to_string(p.head_dim));
  }
}

}  // namespace

void launch_decode(const DecodeParams& p, HalfType compute, KvDtype dtype, cudaStream_t stream, bool programmatic) {
  if (p.num_decode == 0) return;
  SPARK_CHECK(valid_kv_for(compute, dtype), "decode attention: the cache type does not match the compute type");
  const int group = p.num_heads / p.num_kv_heads;
  SPARK_CHECK(p.head_chunks == decode_head_chunks(group, p.head_dim),
              "decode attention: head_chunks does not match the group");
  SPARK_CHECK(p.parts_cap >= 1 && p.parts_cap <= kMaxPartitions, "decode attention: bad partition count");
  const int g = std::min(group, decode_max_group(p.head_dim));
  const int ng = g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : 8;
  const dim3 grid(unsigned(p.num_decode), unsigned(p.num_kv_heads * p.head_chunks), unsigned(p.parts_cap));
  // Instantiates only the pairs valid_kv_for allows: (T, T) and (T, Fp8Kv).
  with_half_type(compute, [&](auto tag) {
    using T = decltype(tag);
    if (dtype == KvDtype::FP8)
      launch_split_d<T, Fp8Kv>(p, ng, grid, stream, programmatic);
    else
      launch_split_d<T, T>(p, ng, grid, stream, programmatic);
    if (p.parts_cap > 1)
      launch_kernel("decode_combine_kernel", programmatic, decode_combine_kernel<T>,
                    dim3(unsigned(p.num_decode), unsigned(p.num_heads)), dim3(128), 0, stream, p);
  });
}

}  // namespace spark::cuda::attn
