// attention.cpp — KV cache writes through slot_mapping and paged causal attention (GQA),
// with gpt-oss's sliding window and sink logits.
#include "engine/backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/backend/cpu/simd.h"
#include "engine/util/check.h"

#pragma GCC optimize("O3")

namespace spark::cpu {

namespace {

SPARK_KERNEL float dot(const float* a, const float* b, int64_t n) {
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

SPARK_KERNEL void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

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
  for (size_t i = 0; i < b.logits_rows.size(); ++i)
    if (b.logits_rows[i] < 0 || b.logits_rows[i] >= t || (i > 0 && b.logits_rows[i] <= b.logits_rows[i - 1]))
      fail("logits_rows must be ascending row indices");
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
  const int64_t num_tokens = batch.num_tokens();
  const int64_t hd = g.head_dim;
  const int64_t group = heads / g.kv_heads;
  const int64_t slot_floats = g.slot_floats();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Row -> sequence, so work items can be (row, head) pairs in any order.
  std::vector<int32_t> seq_of(static_cast<size_t>(num_tokens));
  for (int64_t s = 0; s < batch.num_seqs(); ++s)
    for (int32_t t = batch.query_start[s]; t < batch.query_start[s + 1]; ++t) seq_of[static_cast<size_t>(t)] = static_cast<int32_t>(s);

  pool.parallel_for(num_tokens * heads, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    thread_local std::vector<const float*> rows;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads, h = item % heads, kvh = h / group;
      const int64_t s = seq_of[static_cast<size_t>(t)];
      const int64_t q_rows = batch.query_start[s + 1] - batch.query_start[s];
      const int64_t ctx = batch.context_lens[static_cast<size_t>(s)];
      const int64_t visible = ctx - q_rows + (t - batch.query_start[s]) + 1;  // causal limit
      const int64_t first = extras.window > 0 ? std::max<int64_t>(0, visible - extras.window) : 0;
      const int32_t* table = batch.block_tables.data() + s * batch.max_blocks_per_seq;
      if (scores.size() < static_cast<size_t>(visible)) {
        scores.resize(static_cast<size_t>(visible));
        rows.resize(static_cast<size_t>(visible));
      }
      const float* qv = q + (t * heads + h) * hd;
      const float sink = extras.sinks ? extras.sinks[h] : -INFINITY;
      float mx = sink;
      for (int64_t j = first; j < visible; ++j) {
        const int64_t slot = static_cast<int64_t>(table[j / g.block_size]) * g.block_size + j % g.block_size;
        SPARK_CHECK(slot < g.slots(), "a window token in a block this layer does not hold");
        const int64_t off = slot * slot_floats + kvh * hd;
        rows[static_cast<size_t>(j)] = cache.v.data() + off;
        const float sc = dot(qv, cache.k.data() + off, hd) * scale;
        scores[static_cast<size_t>(j)] = sc;
        mx = std::max(mx, sc);
      }
      float sum = extras.sinks ? std::exp(sink - mx) : 0.0f;
      for (int64_t j = first; j < visible; ++j) {
        const float e = std::exp(scores[static_cast<size_t>(j)] - mx);
        scores[static_cast<size_t>(j)] = e;
        sum += e;
      }
      float* o = out + (t * heads + h) * hd;
      std::fill(o, o + hd, 0.0f);
      const float inv = 1.0f / sum;
      for (int64_t j = first; j < visible; ++j) axpy(scores[static_cast<size_t>(j)] * inv, rows[static_cast<size_t>(j)], o, hd);
    }
  });
}

}  // namespace spark::cpu
