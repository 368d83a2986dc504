// rope_kv.cu — the attention input stage: bias, q/k norm, RoPE, q out and the paged KV write.
#include <algorithm>
#include <type_traits>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/rope_kv.h"

namespace spark::cuda {
namespace {

constexpr int kMaxHeadDim = 512;
// Heads the scalar path (one value a lane, kScalarIters a warp) takes: those of up to 256
// values that 16-byte vectors cannot (80, 96, ...). Wider heads (Gemma 4's 512) are
// multiples of 16 and take vectors of 8.
constexpr int kMaxScalarHeadDim = 256;
constexpr int kScalarIters = kMaxScalarHeadDim / 2 / 32;
constexpr int kMaxThreads = 512;

// Everything the kernel reads, by value (well under the 4 KB parameter limit). T is the
// compute type of qkv, q_out and a 16-bit cache.
template <typename T>
struct Params {
  const T* qkv;
  const float* bias;
  const float* q_norm;
  const float* k_norm;
  const int32_t* positions;
  const int32_t* slot_mapping;
  const float* inv_freq;
  T* q_out;
  void* k_cache;
  void* v_cache;
  uint8_t* k_scale;
  uint8_t* v_scale;
  int64_t num_slots;
  float eps;
  float position_scale;
  float attention_scale;
  int64_t qkv_stride;  // values from one qkv row to the next
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t rot_half;   // rotary_dim / 2: the pairs that rotate
  int32_t pass_half;  // (head_dim - rotary_dim) / 2: the pairs that pass through
  int32_t group;      // lanes per head vector: a power of two <= 32
  bool fp8;
  bool v_from_keys;   // ValueSource
  bool v_norm;
};

template <int V, typename T>
__device__ __forceinline__ void load_half(const T* p, float (&f)[V]) {
  if constexpr (V == 8) {
    load8(p, f);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = to_f32(p[j]);
  }
}

// p is global or shared f32 memory.
template <int V>
__device__ __forceinline__ void load_f32(const float* p, float* f) {
  if constexpr (V == 8) {
    const float4 lo = reinterpret_cast<const float4*>(p)[0], hi = reinterpret_cast<const float4*>(p)[1];
    f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w, f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = p[j];
  }
}

template <int V, typename T>
__device__ __forceinline__ void store_half(T* p, const float (&f)[V]) {
  if constexpr (V == 8) {
    store8(p, f);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = from_f32<T>(f[j]);
  }
}

template <int V>
__device__ __forceinline__ void store_fp8(uint8_t* p, const float* f, float inv_scale) {
  if constexpr (V == 8) {
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) w[j / 4] |= uint32_t(fp8_encode(f[j], inv_scale)) << (8 * (j % 4));
    *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = fp8_encode(f[j], inv_scale);
  }
}

// Reductions over the `group` lanes sharing one head vector; groups are aligned runs of
// lanes, so xor offsets below `group` never leave the group and `mask` names only it.
__device__ __forceinline__ float group_sum(float v, unsigned mask, int group) {
  for (int o = group / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  return v;
}
__device__ __forceinline__ float group_max(float v, unsigned mask, int group) {
  for (int o = group / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(mask, v, o));
  return v;
}

// 1 / rms of the head vector the group's lanes hold (a and b: every lane's pairs).
template <int V, int kIters>
__device__ __forceinline__ float inv_rms(const float (&a)[kIters][V], const float (&b)[kIters][V], unsigned mask,
                                         int group, int hd, float eps) {
  float ss = 0.0f;
#pragma unroll
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int j = 0; j < V; ++j) ss += a[it][j] * a[it][j] + b[it][j] * b[it][j];
  ss = group_sum(ss, mask, group);
  return 1.0f / sqrtf(ss / float(hd) + eps);
}

// A head of head_dim values is head_dim / 2 pairs. Pair i < rot_half is the rotate_half pair
// (i, i + rot_half); with partial rotary the values past rotary_dim pass through and are
// paired (i + rot_half, i + rot_half + pass_half) only so that every lane keeps the same
// share of the head (and the same code) as in the whole-head case. A vector of V pairs never
// straddles the two kinds: V = 8 needs rot_half and pass_half multiples of 8.
struct Pair {
  int a, b;  // offsets of the two values in the head
  bool rotates;
};
template <bool kPartial>
__device__ __forceinline__ Pair pair_at(int i, int rot_half, int pass_half) {
  if (!kPartial || i < rot_half) return {i, i + rot_half, true};
  return {i + rot_half, i + rot_half + pass_half, false};
}

// Loads head h's share of one lane (bias added): a[it][j] and b[it][j] are the values of pair
// (it * group + lane) * V + j; lanes past the head_dim / 2 pairs get zeros.
template <int V, int kIters, bool kPartial, typename T>
__device__ __forceinline__ void load_head(const Params<T>& p, const T* src_row, int h, int lane, float (&a)[kIters][V],
                                          float (&b)[kIters][V]) {
  const int hd = p.head_dim, half = hd / 2;
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i0 = (it * p.group + lane) * V;
    if (i0 < half) {
      const Pair pr = pair_at<kPartial>(i0, p.rot_half, p.pass_half);
      load_half<V>(src_row + h * hd + pr.a, a[it]);
      load_half<V>(src_row + h * hd + pr.b, b[it]);
      if (p.bias) {
        float ba[V], bb[V];
        load_f32<V>(p.bias + h * hd + pr.a, ba);
        load_f32<V>(p.bias + h * hd + pr.b, bb);
#pragma unroll
        for (int j = 0; j < V; ++j) a[it][j] += ba[j], b[it][j] += bb[j];
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) a[it][j] = b[it][j] = 0.0f;  // neutral for the sums and the max
    }
  }
}

// One CTA per row: its cos/sin table is computed once into shared memory (positions reach
// 128k, so the accurate sincosf, which is not cheap) and shared by every q and k head.
// A group of `group` lanes takes one head vector at a time: lane l holds V consecutive
// pairs starting at (it * group + l) * V (pair_at: with the whole head rotating, V values of
// the first half and their rotate_half partners half further on), so RoPE needs no exchange
// between lanes and each access is one 16-byte vector when V = 8. Only the q/k norm and the
// FP8 amax reduce over the group. kPartial: rotary_dim < head_dim (Qwen3.5: 64 of 256), a
// separate instantiation so the whole-head path keeps its code.
template <typename T, int V, int kIters, bool kPartial>
__global__ void __launch_bounds__(kMaxThreads) qkv_rope_kv_kernel(const Params<T> p) {
  __shared__ __align__(16) float trig[kMaxHeadDim];  // cos in [0, rot_half), sin in [rot_half, 2 * rot_half)
  wait_then_allow_next_kernel();
  const int64_t row = blockIdx.x;
  const int hd = p.head_dim, half = hd / 2;
  const int rot_half = kPartial ? p.rot_half : half, pass_half = kPartial ? p.pass_half : 0;
  const int64_t slot = p.slot_mapping[row];
  const bool write_kv = slot >= 0 && slot < p.num_slots;
  const int group = p.group;
  const int lane = threadIdx.x & (group - 1);
  const unsigned mask = group == 32 ? 0xffffffffu : ((1u << group) - 1u) << ((threadIdx.x & 31) & ~(group - 1));
  const int heads = p.num_heads + 2 * p.num_kv_heads;
  const T* src_row = p.qkv + row * p.qkv_stride;
  const int first = threadIdx.x / group, step = blockDim.x / group;
  // Gemma 4's values (ValueSource) only on the vector path: its heads (256, 512) take it,
  // and the scalar path keeps its registers.
  constexpr bool kValueOptions = V == 8;
  // k and v heads of a padded row (slot < 0) are neither read nor written.
  auto skipped = [&](int h) { return h >= p.num_heads && !write_kv; };
  // The qkv head a head is read from: itself, or for values from the keys, its k head.
  auto source = [&](int h) {
    return kValueOptions && p.v_from_keys && h >= p.num_heads + p.num_kv_heads ? h - p.num_kv_heads : h;
  };

  // The first head's loads go out before the table and its barrier, so they are in flight
  // while sincosf runs (for most models each group has exactly one head).
  float a[kIters][V], b[kIters][V];
  if (first < heads && !skipped(first)) load_head<V, kIters, kPartial, T>(p, src_row, source(first), lane, a, b);
  {
    const float pos = float(p.positions[row]) * p.position_scale;
    for (int i = threadIdx.x; i < rot_half; i += blockDim.x) {
      float s, c;
      sincosf(pos * p.inv_freq[i], &s, &c);
      trig[i] = c * p.attention_scale;
      trig[rot_half + i] = s * p.attention_scale;
    }
  }
  __syncthreads();

  for (int h = first; h < heads; h += step) {
    if (skipped(h)) continue;  // the whole group skips: h is the group's
    const int kind = h < p.num_heads ? 0 : h < p.num_heads + p.num_kv_heads ? 1 : 2;  // q, k, v
    const int hh = kind == 0 ? h : kind == 1 ? h - p.num_heads : h - p.num_heads - p.num_kv_heads;
    if (h != first) load_head<V, kIters, kPartial, T>(p, src_row, source(h), lane, a, b);

    if (kValueOptions && kind == 2 && p.v_norm) {  // Gemma 4: RMSNorm over the value head, no weight
      const float inv = inv_rms<V, kIters>(a, b, mask, group, hd, p.eps);
#pragma unroll
      for (int it = 0; it < kIters; ++it)
#pragma unroll
        for (int j = 0; j < V; ++j) a[it][j] *= inv, b[it][j] *= inv;
    }
    if (kind != 2) {
      const float* norm_w = kind == 0 ? p.q_norm : p.k_norm;
      if (norm_w) {  // Qwen3: RMSNorm over this head vector before the rotation
        const float inv = inv_rms<V, kIters>(a, b, mask, group, hd, p.eps);
#pragma unroll
        for (int it = 0; it < kIters; ++it) {
          const int i0 = (it * group + lane) * V;
          if (i0 >= half) continue;
          const Pair pr = pair_at<kPartial>(i0, rot_half, pass_half);
          float wa[V], wb[V];
          load_f32<V>(norm_w + pr.a, wa);
          load_f32<V>(norm_w + pr.b, wb);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            a[it][j] = wa[j] * (a[it][j] * inv);
            b[it][j] = wb[j] * (b[it][j] * inv);
          }
        }
      }
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int i0 = (it * group + lane) * V;
        if (i0 >= half || !pair_at<kPartial>(i0, rot_half, pass_half).rotates) continue;
        float c[V], s[V];
        load_f32<V>(trig + i0, c);
        load_f32<V>(trig + rot_half + i0, s);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float x = a[it][j], y = b[it][j];
          a[it][j] = x * c[j] - y * s[j];
          b[it][j] = y * c[j] + x * s[j];
        }
      }
    }

    if (kind == 0) {
      T* dst = p.q_out + (row * p.num_heads + hh) * hd;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int i0 = (it * group + lane) * V;
        if (i0 >= half) continue;
        const Pair pr = pair_at<kPartial>(i0, rot_half, pass_half);
        store_half<V>(dst + pr.a, a[it]);
        store_half<V>(dst + pr.b, b[it]);
      }
      continue;
    }

    const int64_t vec = slot * p.num_kv_heads + hh;  // this head's vector in the cache
    void* cache = kind == 1 ? p.k_cache : p.v_cache;
    if (!p.fp8) {
      T* dst = static_cast<T*>(cache) + vec * hd;
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        const int i0 = (it * group + lane) * V;
        if (i0 >= half) continue;
        const Pair pr = pair_at<kPartial>(i0, rot_half, pass_half);
        store_half<V>(dst + pr.a, a[it]);
        store_half<V>(dst + pr.b, b[it]);
      }
      continue;
    }
    // FP8: the scale comes from exactly the values stored (after norm and RoPE).
    float amax = 0.0f;
#pragma unroll
    for (int it = 0; it < kIters; ++it)
#pragma unroll
      for (int j = 0; j < V; ++j) amax = fmaxf(amax, fmaxf(fabsf(a[it][j]), fabsf(b[it][j])));
    amax = group_max(amax, mask, group);
    const uint8_t e = fp8_scale_for(amax);
    const float inv_scale = 1.0f / fp8_scale_value(e);  // a power of two: exact
    uint8_t* dst = static_cast<uint8_t*>(cache) + vec * hd;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int i0 = (it * group + lane) * V;
      if (i0 >= half) continue;
      const Pair pr = pair_at<kPartial>(i0, rot_half, pass_half);
      store_fp8<V>(dst + pr.a, a[it], inv_scale);
      store_fp8<V>(dst + pr.b, b[it], inv_scale);
    }
    if (lane == 0) (kind == 1 ? p.k_scale : p.v_scale)[vec] = e;
  }
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

template <typename T>
void qkv_rope_kv_write(const T* qkv, const float* bias, const float* q_norm, const float* k_norm, float eps,
                       const int32_t* positions, const int32_t* slot_mapping, int32_t rows, int32_t num_heads,
                       int32_t qkv_stride, const RopeArgs& rope, const KvShape& kv, KvLayer cache, T* q_out,
                       cudaStream_t stream, bool programmatic, ValueSource values) {
  const int hd = kv.head_dim;
  // Queries only (Gemma 4's assistant): the rows hold no k or v heads, and none is written.
  const bool queries_only = kv.num_slots == 0;
  const int kv_heads = queries_only ? 0 : kv.num_kv_heads;
  SPARK_CHECK(rows >= 0 && num_heads > 0 && (kv_heads > 0 || queries_only), "qkv_rope_kv_write: bad head counts");
  SPARK_CHECK(hd >= 2 && hd % 2 == 0 && hd <= kMaxHeadDim, "qkv_rope_kv_write: head_dim must be even and <= 512");
  // Without RoPE, every pair is a pass-through pair of the partial-rotary path.
  const int rotary_dim = !rope.rotates ? 0 : rope.rotary_dim == 0 ? hd : rope.rotary_dim;
  SPARK_CHECK(rotary_dim >= 0 && rotary_dim % 2 == 0 && rotary_dim <= hd && (rotary_dim > 0 || !rope.rotates),
              "qkv_rope_kv_write: rotary_dim must be even and within head_dim");
  const int heads = num_heads + 2 * kv_heads;                                  // written
  const int read_heads = num_heads + (values.from_keys ? 1 : 2) * kv_heads;  // in a qkv row
  const int64_t stride = qkv_stride == 0 ? int64_t(read_heads) * hd : qkv_stride;
  SPARK_CHECK(stride >= int64_t(read_heads) * hd, "qkv_rope_kv_write: qkv_stride is shorter than the q, k and v heads");
  SPARK_CHECK(kv.num_slots >= 0, "qkv_rope_kv_write: a negative KvShape.num_slots");
  if (rows == 0) return;
  const bool fp8 = kv.dtype == KvDtype::FP8;
  // A 16-bit cache is written as T: a cache of the other 16-bit type would be misread.
  constexpr KvDtype kSame = std::is_same_v<T, f16> ? KvDtype::F16 : KvDtype::BF16;
  SPARK_CHECK(fp8 || kv.dtype == kSame, "qkv_rope_kv_write: a 16-bit KV cache must hold the compute type");
  SPARK_CHECK(qkv && positions && slot_mapping && rope.inv_freq && q_out && (queries_only || (cache.k && cache.v)),
              "qkv_rope_kv_write: null argument");
  SPARK_CHECK(queries_only || !fp8 || (cache.k_scale && cache.v_scale), "qkv_rope_kv_write: FP8 cache without scales");

  Params<T> p{};
  p.qkv = qkv;
  p.bias = bias;
  p.q_norm = q_norm;
  p.k_norm = k_norm;
  p.positions = positions;
  p.slot_mapping = slot_mapping;
  p.inv_freq = rope.inv_freq;
  p.q_out = q_out;
  p.k_cache = cache.k;
  p.v_cache = cache.v;
  p.k_scale = cache.k_scale;
  p.v_scale = cache.v_scale;
  p.num_slots = kv.num_slots;
  p.eps = eps;
  p.position_scale = rope.position_scale;
  p.attention_scale = rope.attention_scale;
  p.num_heads = num_heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = hd;
  p.qkv_stride = stride;
  p.rot_half = rotary_dim / 2;
  p.pass_half = (hd - rotary_dim) / 2;
  p.fp8 = fp8;
  p.v_from_keys = values.from_keys;
  p.v_norm = values.norm;

  const int half = hd / 2;
  const bool partial = rotary_dim < hd;
  // Vectors of 8 when every run of pairs starts on a 16-byte boundary (head_dim a multiple of
  // 16: 64, 128, 256, ...; with partial rotary both rotary_dim and the rest multiples of 16;
  // rows a multiple of 8 values apart); otherwise (80, 96 with odd halves, ...) single values
  // over a full warp.
  const bool vec8 = p.rot_half % 8 == 0 && p.pass_half % 8 == 0 && stride % 8 == 0 && aligned16(qkv) &&
                    aligned16(q_out) && aligned16(cache.k) && aligned16(cache.v) && aligned16(bias) &&
                    aligned16(q_norm) && aligned16(k_norm) && aligned16(rope.inv_freq);
  int group = 32;
  if (vec8) {
    group = 1;
    while (group * 8 < half) group *= 2;  // half <= 256: at most 32 lanes, one pass each
  }
  SPARK_CHECK(vec8 || hd <= kMaxScalarHeadDim,
              "qkv_rope_kv_write: a head_dim above 256 needs 16-byte aligned vectors of 8 (a multiple of 16)");
  SPARK_CHECK(vec8 || (!values.from_keys && !values.norm),
              "qkv_rope_kv_write: values from the keys or normed need 16-byte aligned vectors of 8");
  p.group = group;
  const int threads = int(std::min<int64_t>(kMaxThreads, ceil_div(int64_t(heads) * group, 32) * 32));
  const auto kernel =
      vec8 ? (partial ? qkv_rope_kv_kernel<T, 8, 1, true> : qkv_rope_kv_kernel<T, 8, 1, false>)
           : (partial ? qkv_rope_kv_kernel<T, 1, kScalarIters, true> : qkv_rope_kv_kernel<T, 1, kScalarIters, false>);
  launch_kernel("qkv_rope_kv_kernel", programmatic, kernel, dim3(unsigned(rows)), dim3(unsigned(threads)), 0, stream,
                p);
}

template void qkv_rope_kv_write<bf16>(const bf16*, const float*, const float*, const float*, float, const int32_t*,
                                      const int32_t*, int32_t, int32_t, int32_t, const RopeArgs&, const KvShape&,
                                      KvLayer, bf16*, cudaStream_t, bool, ValueSource);
template void qkv_rope_kv_write<f16>(const f16*, const float*, const float*, const float*, float, const int32_t*,
                                     const int32_t*, int32_t, int32_t, int32_t, const RopeArgs&, const KvShape&,
                                     KvLayer, f16*, cudaStream_t, bool, ValueSource);

}  // namespace spark::cuda
