// test_cpu_attention.cpp — paged causal attention against a double-precision reference, and
// the bit-for-bit batch invariance speculative decoding relies on: the rows of a
// verification step get exactly the bits of one-row decode steps at the same positions.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu/attention.h"
#include "engine/backend/cpu/simd.h"

using namespace spark;
using namespace spark::cpu;

namespace {

struct Shape {
  int64_t head_dim, kv_heads, group, window;
  bool sinks;
};

// One sequence's step: `rows` new rows ending at context `ctx`, its blocks listed in `table`.
struct SeqStep {
  int64_t rows, ctx;
  std::vector<int32_t> table;
};

Batch make_batch(const std::vector<SeqStep>& seqs, int64_t blocks_per_seq) {
  Batch b;
  b.max_blocks_per_seq = blocks_per_seq;
  b.query_start.push_back(0);
  for (const SeqStep& s : seqs) {
    for (int64_t r = 0; r < s.rows; ++r) {
      b.token_ids.push_back(0);
      b.positions.push_back(static_cast<int32_t>(s.ctx - s.rows + r));
      b.slot_mapping.push_back(0);
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(static_cast<int32_t>(s.ctx));
    b.block_tables.insert(b.block_tables.end(), s.table.begin(), s.table.end());
  }
  return b;
}

// Softmax attention of query `q` (head h) over keys [first, visible) of a sequence, in double.
std::vector<double> reference(const KvGeometry& g, const LayerKv& kv, const std::vector<int32_t>& table, const float* q,
                              int64_t kvh, int64_t first, int64_t visible, const float* sink) {
  const int64_t hd = g.head_dim;
  std::vector<double> s;
  double mx = sink ? *sink : -INFINITY;
  auto off = [&](int64_t j) {
    return (table[size_t(j / g.block_size)] * g.block_size + j % g.block_size) * g.slot_floats() + kvh * hd;
  };
  for (int64_t j = first; j < visible; ++j) {
    double d = 0;
    for (int64_t i = 0; i < hd; ++i) d += double(q[i]) * kv.k.data()[off(j) + i];
    s.push_back(d / std::sqrt(double(hd)));
    mx = std::max(mx, s.back());
  }
  double sum = sink ? std::exp(*sink - mx) : 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> out(size_t(hd), 0.0);
  for (int64_t j = first; j < visible; ++j)
    for (int64_t i = 0; i < hd; ++i) out[size_t(i)] += s[size_t(j - first)] / sum * kv.v.data()[off(j) + i];
  return out;
}

}  // namespace

TEST_CASE("cpu attention: verification rows equal one-row steps bit for bit, and the reference") {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> val(-2.f, 2.f);
  // Both kernels: the AVX2 one where the CPU has it, and the portable one (aarch64, old x86).
  for (bool portable : {false, true})
    for (int threads : {1, 2})
      for (Shape sh : {Shape{64, 3, 3, 0, false}, Shape{128, 2, 4, 0, false}, Shape{64, 1, 8, 7, true},
                       Shape{40, 2, 1, 0, true}, Shape{12, 1, 2, 0, false}}) {
        portable_kernels_forced() = portable;
        CAPTURE(portable);
        CAPTURE(threads);
        CAPTURE(sh.head_dim);
        CAPTURE(sh.group);
        ThreadPool pool(threads);
        const KvGeometry g{48, 16, sh.kv_heads, sh.head_dim};
        const int64_t heads = sh.kv_heads * sh.group, hd = sh.head_dim, blocks_per_seq = 12;
        LayerKv kv;
        kv.k.allocate(size_t(g.slots() * g.slot_floats()));
        kv.v.allocate(size_t(g.slots() * g.slot_floats()));
        for (int64_t i = 0; i < g.slots() * g.slot_floats(); ++i) {
          kv.k.data()[i] = val(rng);
          kv.v.data()[i] = val(rng);
        }
        std::vector<float> sinks(static_cast<size_t>(heads));
        for (float& s : sinks) s = val(rng);
        const AttentionExtras extras{sh.window, sh.sinks ? sinks.data() : nullptr};
        // Three sequences on shuffled blocks: a 5-row verification step at context 150, a
        // 1-row decode at 33 and a 9-row prefill chunk at 70 (tiles mix their queries).
        std::vector<int32_t> ids(48);
        for (int i = 0; i < 48; ++i) ids[size_t(i)] = i;
        std::shuffle(ids.begin(), ids.end(), rng);
        std::vector<SeqStep> seqs = {{5, 150, {}}, {1, 33, {}}, {9, 70, {}}};
        for (size_t s = 0; s < seqs.size(); ++s)
          seqs[s].table.assign(ids.begin() + long(s * 12), ids.begin() + long(s * 12 + 12));
        const Batch batch = make_batch(seqs, blocks_per_seq);
        const int64_t T = batch.num_tokens();
        std::vector<float> q(size_t(T * heads * hd)), out(q.size());
        for (float& x : q) x = val(rng);
        attention(pool, batch, g, heads, q.data(), kv, out.data(), extras);

        int64_t row = 0;
        for (const SeqStep& s : seqs)
          for (int64_t r = 0; r < s.rows; ++r, ++row) {
            // The same row alone, as a one-row decode step at its position.
            const Batch one = make_batch({{1, s.ctx - s.rows + r + 1, s.table}}, blocks_per_seq);
            std::vector<float> alone(size_t(heads * hd));
            attention(pool, one, g, heads, q.data() + row * heads * hd, kv, alone.data(), extras);
            CHECK(std::memcmp(alone.data(), out.data() + row * heads * hd, alone.size() * sizeof(float)) == 0);
            const int64_t visible = s.ctx - s.rows + r + 1;
            const int64_t first = sh.window > 0 ? std::max<int64_t>(0, visible - sh.window) : 0;
            for (int64_t h = 0; h < heads; ++h) {
              const auto want = reference(g, kv, s.table, q.data() + (row * heads + h) * hd, h / sh.group, first,
                                          visible, sh.sinks ? &sinks[size_t(h)] : nullptr);
              double err = 0;
              for (int64_t i = 0; i < hd; ++i)
                err = std::max(err, std::abs(want[size_t(i)] - out[size_t((row * heads + h) * hd + i)]));
              CHECK(err < 1e-5);
            }
          }
        portable_kernels_forced() = false;
      }
}
