// attention.cpp — KV cache writes through slot_mapping and paged causal attention (GQA),
// with gpt-oss's sliding window and sink logits.
#include "engine/backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/backend/cpu/simd.h"
#include "engine/util/check.h"

#if SPARK_X86_AVX2
#include <immintrin.h>
#endif

#pragma GCC optimize("O3")

namespace spark::cpu {

namespace {

// The kernels below give each query its own accumulators, filled in key order, so a
// query's result does not depend on which other queries share its tile or its step
// (batch invariance: a verification step's rows equal one-row decode steps bit for bit).
// One query's dot product with a key, for any head_dim.
[[gnu::always_inline]] inline float dot(const float* a, const float* b, int64_t n) {
  v8f acc0{}, acc1{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 += load8(a + i) * load8(b + i);
    acc1 += load8(a + i + 8) * load8(b + i + 8);
  }
  for (; i + 8 <= n; i += 8) acc0 += load8(a + i) * load8(b + i);
  float s = hsum8(acc0 + acc1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The same dot product for head_dim = 8 * NV (NV even) with the query already in registers,
// before its horizontal sum: the same accumulators and order as dot(), so the same bits.
template <int NV>
[[gnu::always_inline]] inline v8f dot_lanes(const v8f* q, const float* k) {
  v8f acc0{}, acc1{};
  for (int c = 0; c < NV; c += 2) {
    acc0 += q[c] * load8(k + 8 * c);
    acc1 += q[c + 1] * load8(k + 8 * c + 8);
  }
  return acc0 + acc1;
}

// Broadcasting a weight, storing accumulators and summing lanes, where GCC's lowering of
// the portable forms is poor on x86 (a broadcast built lane by lane, accumulators kept in
// memory, a scalar add chain per sum).
struct PortableLanes {
  [[gnu::always_inline]] static v8f splat(const float* p) { return splat8(*p); }
  [[gnu::always_inline]] static void store(float* p, v8f v) { store8(p, v); }
  [[gnu::always_inline]] static void hsum4(const v8f s[4], float out[4]) {
    for (int k = 0; k < 4; ++k) out[k] = hsum8(s[k]);
  }
};

#if SPARK_X86_AVX2
struct Avx2Lanes {
  SPARK_AVX2 static inline v8f splat(const float* p) { return (v8f)_mm256_broadcast_ss(p); }
  // store8's memcpy from an array of accumulators keeps the whole array in memory.
  SPARK_AVX2 static inline void store(float* p, v8f v) { _mm256_storeu_ps(p, (__m256)v); }
  // Four hsum8s at once with the same additions: lanes i + (i + 4), then adjacent pairs,
  // then the two halves.
  SPARK_AVX2 static inline __m256 halves(__m256 a, __m256 b) {  // [a0+a4 .. a3+a7, b0+b4 .. b3+b7]
    return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  }
  SPARK_AVX2 static inline void hsum4(const v8f s[4], float out[4]) {
    const __m256 u = _mm256_hadd_ps(halves((__m256)s[0], (__m256)s[1]), halves((__m256)s[2], (__m256)s[3]));
    const __m256 t = _mm256_hadd_ps(u, u);  // [s0, s2, s0, s2, s1, s3, s1, s3]
    _mm_storeu_ps(out, _mm_unpacklo_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1)));
  }
};
#endif

// Query vectors of one sequence that read the same kv head: its rows (the drafts of a
// verification step, a prefill chunk) times the heads of its GQA group. A tile of them
// walks the keys once, so each K and V row is loaded from memory once for all of its
// queries.
constexpr int kMaxTileQueries = 8;
// Keys are taken in chunks whose K (then V) rows stay in L1 while every query of the tile
// passes over them.
constexpr int64_t kChunkFloats = 4096;

struct Query {
  const float* q;
  float* out;
  int64_t first, visible;  // keys [first, visible) of the sequence
  float sink;              // -inf without a sink
};

// scores[j] = q · k_j * scale for keys j in [j0, j1), key j's row at k_cache + key_off[j].
template <typename Lanes, int NV>
[[gnu::always_inline]] inline void scores_held(const float* q, const int64_t* key_off, int64_t j0, int64_t j1,
                                               const float* k_cache, float scale, float* scores) {
  v8f qv[NV];
  for (int c = 0; c < NV; ++c) qv[c] = load8(q + 8 * c);
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    v8f lanes[4];
    float sums[4];
    for (int k = 0; k < 4; ++k) lanes[k] = dot_lanes<NV>(qv, k_cache + key_off[j + k]);
    Lanes::hsum4(lanes, sums);
    for (int k = 0; k < 4; ++k) scores[j + k] = sums[k] * scale;
  }
  for (; j < j1; ++j) scores[j] = hsum8(dot_lanes<NV>(qv, k_cache + key_off[j])) * scale;
}

// out[0, 8 * NV) += weights[j] * v_j over keys [j0, j1), element by element in key order
// (as a plain axpy per key would), with the NV output vectors held in registers.
template <typename Lanes, int NV>
[[gnu::always_inline]] inline void accumulate_held(const float* weights, const int64_t* key_off, int64_t j0, int64_t j1,
                                                   const float* v_cache, float* out) {
  v8f acc[NV];
  for (int c = 0; c < NV; ++c) acc[c] = load8(out + 8 * c);
  for (int64_t j = j0; j < j1; ++j) {
    const v8f a = Lanes::splat(weights + j);
    const float* v = v_cache + key_off[j];
    for (int c = 0; c < NV; ++c) acc[c] += a * load8(v + 8 * c);
  }
  for (int c = 0; c < NV; ++c) Lanes::store(out + 8 * c, acc[c]);
}

// key_off[j] (j in [lo, hi)) is the offset of key j's K and V rows in the caches. scores
// holds nq rows of `span` floats, row i indexed by key from lo.
template <typename Lanes>
[[gnu::always_inline]] inline void attend_tile_body(const Query* qs, int nq, const int64_t* key_off, int64_t lo,
                                                    int64_t hi, const float* k_cache, const float* v_cache, int64_t hd,
                                                    float scale, bool has_sinks, float* scores) {
  const int64_t span = hi - lo, chunk = std::max<int64_t>(8, kChunkFloats / hd);
  key_off -= lo;
  auto row_of = [&](int i) { return scores + i * span - lo; };
  for (int64_t c0 = lo; c0 < hi; c0 += chunk) {
    const int64_t c1 = std::min(hi, c0 + chunk);
    for (int i = 0; i < nq; ++i) {
      const int64_t j0 = std::max(c0, qs[i].first), j1 = std::min(c1, qs[i].visible);
      float* row = row_of(i);
      if (hd == 64) {
        scores_held<Lanes, 8>(qs[i].q, key_off, j0, j1, k_cache, scale, row);
      } else if (hd == 128) {
        scores_held<Lanes, 16>(qs[i].q, key_off, j0, j1, k_cache, scale, row);
      } else {
        for (int64_t j = j0; j < j1; ++j) row[j] = dot(qs[i].q, k_cache + key_off[j], hd) * scale;
      }
    }
  }
  // Softmax; each score becomes its value's weight.
  for (int i = 0; i < nq; ++i) {
    float* row = row_of(i);
    float mx = qs[i].sink;
    for (int64_t j = qs[i].first; j < qs[i].visible; ++j) mx = std::max(mx, row[j]);
    float sum = has_sinks ? std::exp(qs[i].sink - mx) : 0.0f;
    for (int64_t j = qs[i].first; j < qs[i].visible; ++j) {
      const float e = std::exp(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int64_t j = qs[i].first; j < qs[i].visible; ++j) row[j] *= inv;
    std::fill(qs[i].out, qs[i].out + hd, 0.0f);
  }
  for (int64_t c0 = lo; c0 < hi; c0 += chunk) {
    const int64_t c1 = std::min(hi, c0 + chunk);
    for (int i = 0; i < nq; ++i) {
      const int64_t j0 = std::max(c0, qs[i].first), j1 = std::min(c1, qs[i].visible);
      const float* w = row_of(i);
      float* out = qs[i].out;
      int64_t d = 0;
      for (; d + 64 <= hd; d += 64) accumulate_held<Lanes, 8>(w, key_off, j0, j1, v_cache + d, out + d);
      for (; d + 8 <= hd; d += 8) accumulate_held<Lanes, 1>(w, key_off, j0, j1, v_cache + d, out + d);
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t e = d; e < hd; ++e) out[e] += w[j] * v_cache[key_off[j] + e];
    }
  }
}

void attend_tile_portable(const Query* qs, int nq, const int64_t* key_off, int64_t lo, int64_t hi, const float* k_cache,
                          const float* v_cache, int64_t hd, float scale, bool has_sinks, float* scores) {
  attend_tile_body<PortableLanes>(qs, nq, key_off, lo, hi, k_cache, v_cache, hd, scale, has_sinks, scores);
}

#if SPARK_X86_AVX2
SPARK_AVX2 void attend_tile_avx2(const Query* qs, int nq, const int64_t* key_off, int64_t lo, int64_t hi,
                                 const float* k_cache, const float* v_cache, int64_t hd, float scale, bool has_sinks,
                                 float* scores) {
  attend_tile_body<Avx2Lanes>(qs, nq, key_off, lo, hi, k_cache, v_cache, hd, scale, has_sinks, scores);
}
#endif

void attend_tile(const Query* qs, int nq, const int64_t* key_off, int64_t lo, int64_t hi, const float* k_cache,
                 const float* v_cache, int64_t hd, float scale, bool has_sinks, float* scores) {
#if SPARK_X86_AVX2
  if (cpu_has_avx2()) return attend_tile_avx2(qs, nq, key_off, lo, hi, k_cache, v_cache, hd, scale, has_sinks, scores);
#endif
  attend_tile_portable(qs, nq, key_off, lo, hi, k_cache, v_cache, hd, scale, has_sinks, scores);
}

// A tile: queries [begin, begin + count) of sequence `seq` and kv head `kv_head`, numbered
// row-major over (the sequence's rows, the group's heads).
struct Tile {
  int32_t seq, kv_head, begin, count;
};

}  // namespace

void validate_batch(const Batch& b, const KvGeometry& g) {
  const int64_t t = b.num_tokens(), s = b.num_seqs();
  // The scheduler builds batches and the peer link validates them on arrival: a bad one
  // here is a bug.
  auto fail = [](const std::string& m) { check_failed("valid batch", __FILE__, __LINE__, m); };
  if (static_cast<int64_t>(b.positions.size()) != t || static_cast<int64_t>(b.slot_mapping.size()) != t)
    fail("positions and slot_mapping must have one entry per token");
  if (s < 0 || (t > 0 && s == 0)) fail("query_start must have num_seqs + 1 entries");
  if (static_cast<int64_t>(b.context_lens.size()) != s) fail("context_lens must have one entry per sequence");
  if (b.max_blocks_per_seq < 0 || static_cast<int64_t>(b.block_tables.size()) != s * b.max_blocks_per_seq)
    fail("block_tables must be num_seqs x max_blocks_per_seq");
  if (s > 0 && (b.query_start[0] != 0 || b.query_start[static_cast<size_t>(s)] != t))
    fail("query_start must run from 0 to num_tokens");
  for (int64_t i = 0; i < s; ++i) {
    const int64_t q = b.query_start[i + 1] - b.query_start[i];
    const int64_t ctx = b.context_lens[static_cast<size_t>(i)];
    if (q < 0) fail("query_start must not decrease");
    if (ctx < q) fail("context_lens[" + std::to_string(i) + "] is shorter than the sequence's new rows");
    if (ctx > b.max_blocks_per_seq * g.block_size)
      fail("context_lens[" + std::to_string(i) + "] exceeds the block table");
    for (int64_t k = 0; k < (ctx + g.block_size - 1) / g.block_size; ++k) {
      const int32_t blk = b.block_tables[static_cast<size_t>(i * b.max_blocks_per_seq + k)];
      if (blk < 0 || blk >= g.num_blocks) fail("block id " + std::to_string(blk) + " out of range");
    }
  }
  for (int32_t slot : b.slot_mapping)
    if (slot < 0 || slot >= g.slots()) fail("slot " + std::to_string(slot) + " out of range");
  if (b.block_copies.size() % 2 != 0) fail("block_copies must hold (source, destination) pairs");
  for (int32_t blk : b.block_copies)
    if (blk < 0 || blk >= g.num_blocks) fail("copied block id " + std::to_string(blk) + " out of range");
  auto check_rows = [&](const std::vector<int32_t>& rows, const char* name) {
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i] < 0 || rows[i] >= t || (i > 0 && rows[i] <= rows[i - 1]))
        fail(std::string(name) + " must be ascending row indices");
  };
  check_rows(b.logits_rows, "logits_rows");
  check_rows(b.hidden_rows, "hidden_rows");
}

void validate_state_slots(const Batch& b, int64_t num_slots) {
  auto fail = [](const std::string& m) { throw InputError("invalid batch: " + m); };
  const int32_t S = b.num_seqs();
  if (static_cast<int64_t>(b.state_slots.size()) != S)
    fail(std::to_string(b.state_slots.size()) + " state slots for " + std::to_string(S) + " sequences");
  auto in_range = [&](int32_t slot) { return slot >= 0 && slot < num_slots; };
  if (b.state_copies.size() % 2 != 0) fail("state_copies must hold (source, destination) pairs");
  for (size_t i = 0; i < b.state_copies.size(); i += 2) {
    const int32_t src = b.state_copies[i], dst = b.state_copies[i + 1];
    if (!in_range(src) || !in_range(dst) || src == dst)
      fail("state copy " + std::to_string(src) + " -> " + std::to_string(dst) + " outside [0, " +
           std::to_string(num_slots) + ")");
  }
  for (int32_t s = 0; s < S; ++s) {
    const int32_t slot = b.state_slots[static_cast<size_t>(s)];
    if (!in_range(slot))
      fail("state slot " + std::to_string(slot) + " outside [0, " + std::to_string(num_slots) + ")");
    for (int32_t o = 0; o < s; ++o)
      if (b.state_slots[static_cast<size_t>(o)] == slot) fail("two sequences share a state slot");
  }
}

void KvBuffer::allocate(size_t floats) {
  data_.reset(static_cast<float*>(std::calloc(floats, sizeof(float))));
  if (!data_) throw RuntimeError("cannot allocate a KV cache of " + std::to_string(floats * sizeof(float)) + " bytes");
}

void copy_blocks(const std::vector<int32_t>& pairs, const KvGeometry& g, LayerKv& cache) {
  const int64_t n = g.block_size * g.slot_floats();
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    const int64_t src = pairs[i], dst = pairs[i + 1];
    std::copy(cache.k.data() + src * n, cache.k.data() + (src + 1) * n, cache.k.data() + dst * n);
    std::copy(cache.v.data() + src * n, cache.v.data() + (src + 1) * n, cache.v.data() + dst * n);
  }
}

void write_kv(const Batch& batch, const KvGeometry& g, const float* k, const float* v, LayerKv& cache) {
  const int64_t n = g.slot_floats();
  for (int64_t t = 0; t < batch.num_tokens(); ++t) {
    const int64_t slot = batch.slot_mapping[static_cast<size_t>(t)];
    SPARK_CHECK(slot < g.slots(), "a new token's slot outside this layer's blocks (new tokens take window blocks)");
    std::copy(k + t * n, k + (t + 1) * n, cache.k.data() + slot * n);
    std::copy(v + t * n, v + (t + 1) * n, cache.v.data() + slot * n);
  }
}

void attention(ThreadPool& pool, const Batch& batch, const KvGeometry& g, int64_t heads, const float* q,
               const LayerKv& cache, float* out, const AttentionExtras& extras) {
  const int64_t hd = g.head_dim;
  const int64_t group = heads / g.kv_heads;
  const int64_t slot_floats = g.slot_floats();
  const float scale = extras.scale > 0 ? extras.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  // Tiles small enough that every thread gets several (a decode step of one sequence has
  // only `heads` queries), at most kMaxTileQueries.
  const int64_t queries = batch.num_tokens() * heads;
  const int64_t per_tile = std::clamp<int64_t>(queries / (4 * pool.size()), 1, kMaxTileQueries);
  std::vector<Tile> tiles;
  for (int64_t s = 0; s < batch.num_seqs(); ++s) {
    const int64_t n = (batch.query_start[s + 1] - batch.query_start[s]) * group;
    for (int64_t kvh = 0; kvh < g.kv_heads; ++kvh)
      for (int64_t b = 0; b < n; b += per_tile)
        tiles.push_back({static_cast<int32_t>(s), static_cast<int32_t>(kvh), static_cast<int32_t>(b),
                         static_cast<int32_t>(std::min(per_tile, n - b))});
  }

  pool.parallel_for(static_cast<int64_t>(tiles.size()), 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    thread_local std::vector<int64_t> key_off;
    for (int64_t ti = begin; ti < end; ++ti) {
      const Tile& tile = tiles[static_cast<size_t>(ti)];
      const int64_t s = tile.seq, row0 = batch.query_start[s];
      const int64_t q_rows = batch.query_start[s + 1] - row0;
      const int64_t ctx = batch.context_lens[static_cast<size_t>(s)];
      Query qs[kMaxTileQueries];
      int64_t lo = ctx, hi = 0;
      for (int i = 0; i < tile.count; ++i) {
        const int64_t v = tile.begin + i, r = v / group, h = tile.kv_head * group + v % group, t = row0 + r;
        const int64_t visible = extras.causal ? ctx - q_rows + r + 1 : ctx;
        const int64_t first = extras.window > 0 ? std::max<int64_t>(0, visible - extras.window) : 0;
        qs[i] = {q + (t * heads + h) * hd, out + (t * heads + h) * hd, first, visible,
                 extras.sinks ? extras.sinks[h] : -INFINITY};
        lo = std::min(lo, first);
        hi = std::max(hi, visible);
      }
      // Slot offsets of the keys, walked block by block (no division per key).
      const int32_t* table = batch.block_tables.data() + s * batch.max_blocks_per_seq;
      key_off.resize(static_cast<size_t>(hi - lo));
      for (int64_t j = lo, blk = lo / g.block_size, in = lo % g.block_size; j < hi; ++j) {
        const int64_t slot = static_cast<int64_t>(table[blk]) * g.block_size + in;
        SPARK_CHECK(slot < g.slots(), "a window token in a block this layer does not hold");
        key_off[static_cast<size_t>(j - lo)] = slot * slot_floats + tile.kv_head * hd;
        if (++in == g.block_size) in = 0, ++blk;
      }
      scores.resize(static_cast<size_t>(tile.count * (hi - lo)));
      attend_tile(qs, tile.count, key_off.data(), lo, hi, cache.k.data(), cache.v.data(), hd, scale,
                  extras.sinks != nullptr, scores.data());
    }
  });
}

}  // namespace spark::cpu
