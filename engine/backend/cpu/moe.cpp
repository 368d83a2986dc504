// moe.cpp — router softmax, top-k selection and per-expert grouped SwiGLU.
#include "engine/backend/cpu/moe.h"

#include <algorithm>
#include <numeric>

#include "engine/backend/cpu/matmul.h"
#include "engine/backend/cpu/ops.h"

namespace spark::cpu {

void moe_ffn(ThreadPool& pool, const MoeWeights& w, const float* x, int64_t tokens, int64_t hidden, float* out) {
  const int64_t experts = w.router->rows();
  const int64_t k = std::min(w.top_k, experts);
  std::vector<float> probs(static_cast<size_t>(tokens * experts));
  matmul(pool, x, tokens, *w.router, probs.data());

  // Per expert: which tokens it serves and with what weight.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(experts));
  std::vector<std::vector<float>> weight_of(static_cast<size_t>(experts));
  std::vector<int64_t> order(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    float* p = probs.data() + t * experts;
    softmax(p, experts);
    std::iota(order.begin(), order.end(), 0);
    // Highest probability first; the lower expert index wins a tie, as torch.topk does on CPU.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
      return p[a] > p[b] || (p[a] == p[b] && a < b);
    });
    float sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += p[order[static_cast<size_t>(i)]];
    for (int64_t i = 0; i < k; ++i) {
      const int64_t e = order[static_cast<size_t>(i)];
      rows_of[static_cast<size_t>(e)].push_back(t);
      weight_of[static_cast<size_t>(e)].push_back(w.norm_topk_prob ? p[e] / sum : p[e]);
    }
  }

  std::fill(out, out + tokens * hidden, 0.0f);
  std::vector<float> xs, gate, up, down;
  for (int64_t e = 0; e < experts; ++e) {
    const auto& rows = rows_of[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t inter = w.gate[static_cast<size_t>(e)]->rows();
    xs.resize(static_cast<size_t>(n * hidden));
    for (int64_t i = 0; i < n; ++i) std::copy(x + rows[i] * hidden, x + (rows[i] + 1) * hidden, xs.begin() + i * hidden);
    gate.resize(static_cast<size_t>(n * inter));
    up.resize(static_cast<size_t>(n * inter));
    down.resize(static_cast<size_t>(n * hidden));
    matmul_many(pool, xs.data(), n, {{w.gate[static_cast<size_t>(e)], gate.data()}, {w.up[static_cast<size_t>(e)], up.data()}});
    silu_mul(gate.data(), up.data(), n * inter, gate.data());
    matmul(pool, gate.data(), n, *w.down[static_cast<size_t>(e)], down.data());
    for (int64_t i = 0; i < n; ++i) {
      const float p = weight_of[static_cast<size_t>(e)][static_cast<size_t>(i)];
      float* o = out + rows[i] * hidden;
      const float* d = down.data() + i * hidden;
      for (int64_t j = 0; j < hidden; ++j) o[j] += p * d[j];
    }
  }
}

}  // namespace spark::cpu
