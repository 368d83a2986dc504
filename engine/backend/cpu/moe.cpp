// moe.cpp — router softmax, top-k selection and per-expert grouped SwiGLU (Qwen3-MoE), and
// the variants: gpt-oss's router bias, softmax over the top k, expert biases and clamped
// SwiGLU; Nemotron-H's sigmoid router; Gemma 4's GELU-tanh experts and per-expert scales.
#include "engine/backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/backend/cpu/matmul.h"
#include "engine/backend/cpu/ops.h"

namespace spark::cpu {

void route_token(RouterRule rule, const float* logits, const float* bias, int64_t experts, int64_t top_k,
                 bool normalize, int32_t* ids, float* weights) {
  std::vector<float> score(logits, logits + experts);
  if (rule == RouterRule::SOFTMAX_TOPK) softmax(score.data(), experts);
  if (rule == RouterRule::SIGMOID_BIAS)
    for (float& v : score) v = 1.0f / (1.0f + std::exp(-v));
  const std::vector<float> weight_of = score;  // SIGMOID_BIAS weighs by the unbiased scores
  if (bias && rule != RouterRule::SOFTMAX_TOPK)
    for (int64_t e = 0; e < experts; ++e) score[size_t(e)] += bias[e];
  std::vector<int32_t> order(static_cast<size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  // Highest score first; the lower expert index wins a tie, as torch.topk does on CPU.
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
    return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b);
  });
  for (int64_t i = 0; i < top_k; ++i) ids[i] = order[size_t(i)];
  if (rule == RouterRule::TOPK_SOFTMAX) {
    for (int64_t i = 0; i < top_k; ++i) weights[i] = score[size_t(ids[i])];
    softmax(weights, top_k);
    return;
  }
  float sum = rule == RouterRule::SIGMOID_BIAS ? 1e-20f : 0.0f;
  for (int64_t i = 0; i < top_k; ++i) sum += weight_of[size_t(ids[i])];
  for (int64_t i = 0; i < top_k; ++i) weights[i] = normalize ? weight_of[size_t(ids[i])] / sum : weight_of[size_t(ids[i])];
}

void moe_ffn(ThreadPool& pool, const MoeWeights& w, const float* x, int64_t tokens, int64_t hidden, float* out,
             const float* route_x) {
  const int64_t experts = w.router->rows();
  const int64_t k = std::min(w.top_k, experts);
  std::vector<float> probs(static_cast<size_t>(tokens * experts));
  matmul(pool, route_x ? route_x : x, tokens, *w.router, probs.data());
  std::vector<float> bias;
  if (w.router_bias) {
    bias.resize(static_cast<size_t>(experts));
    decode_row(*w.router_bias, 0, bias.data());
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t e = 0; e < experts; ++e) probs[static_cast<size_t>(t * experts + e)] += bias[static_cast<size_t>(e)];
  }

  // Per expert: which tokens it serves and with what weight.
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(experts));
  std::vector<std::vector<float>> weight_of(static_cast<size_t>(experts));
  std::vector<int32_t> ids(static_cast<size_t>(k));
  std::vector<float> weights(static_cast<size_t>(k));
  // The router bias is already in the logits (gpt-oss's router is a linear layer with bias).
  const RouterRule rule = w.score_bias         ? RouterRule::SIGMOID_BIAS
                          : w.softmax_after_topk ? RouterRule::TOPK_SOFTMAX
                                                 : RouterRule::SOFTMAX_TOPK;
  std::vector<float> score_bias;
  if (w.score_bias) {
    score_bias.resize(static_cast<size_t>(experts));
    decode_row(*w.score_bias, 0, score_bias.data());
  }
  for (int64_t t = 0; t < tokens; ++t) {
    route_token(rule, probs.data() + t * experts, w.score_bias ? score_bias.data() : nullptr, experts, k,
                w.norm_topk_prob, ids.data(), weights.data());
    for (int64_t i = 0; i < k; ++i)
      weights[size_t(i)] *= w.expert_scale.empty() ? w.routed_scale : w.expert_scale[size_t(ids[size_t(i)])];
    for (int64_t i = 0; i < k; ++i) {
      rows_of[static_cast<size_t>(ids[size_t(i)])].push_back(t);
      weight_of[static_cast<size_t>(ids[size_t(i)])].push_back(weights[size_t(i)]);
    }
  }

  std::fill(out, out + tokens * hidden, 0.0f);
  std::vector<float> xs, gate, up, down, b_gate, b_up, b_down;
  // Adds row vector `b` (an expert's bias, decoded) to each of n rows of width m.
  auto add_bias = [](const Tensor* bt, std::vector<float>& b, float* y, int64_t n, int64_t m) {
    if (!bt) return;
    b.resize(static_cast<size_t>(m));
    decode_row(*bt, 0, b.data());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) y[i * m + j] += b[static_cast<size_t>(j)];
  };
  auto bias_of = [](const std::vector<const Tensor*>& v, int64_t e) {
    return v.empty() ? nullptr : v[static_cast<size_t>(e)];
  };
  for (int64_t e = 0; e < experts; ++e) {
    const auto& rows = rows_of[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t inter = w.up[static_cast<size_t>(e)]->rows();
    xs.resize(static_cast<size_t>(n * hidden));
    for (int64_t i = 0; i < n; ++i) std::copy(x + rows[i] * hidden, x + (rows[i] + 1) * hidden, xs.begin() + i * hidden);
    gate.resize(static_cast<size_t>(n * inter));
    up.resize(static_cast<size_t>(n * inter));
    down.resize(static_cast<size_t>(n * hidden));
    if (w.relu2) {
      matmul(pool, xs.data(), n, *w.up[static_cast<size_t>(e)], gate.data());
      relu2(gate.data(), n * inter, gate.data());
    } else {
      matmul_many(pool, xs.data(), n,
                  {{w.gate[static_cast<size_t>(e)], gate.data()}, {w.up[static_cast<size_t>(e)], up.data()}});
      add_bias(bias_of(w.gate_bias, e), b_gate, gate.data(), n, inter);
      add_bias(bias_of(w.up_bias, e), b_up, up.data(), n, inter);
      if (w.swiglu_limit > 0) clamped_swiglu(gate.data(), up.data(), n * inter, w.swiglu_limit, w.swiglu_alpha, gate.data());
      else if (w.gelu_tanh) gelu_tanh_mul(gate.data(), up.data(), n * inter, gate.data());
      else silu_mul(gate.data(), up.data(), n * inter, gate.data());
    }
    matmul(pool, gate.data(), n, *w.down[static_cast<size_t>(e)], down.data());
    add_bias(bias_of(w.down_bias, e), b_down, down.data(), n, hidden);
    for (int64_t i = 0; i < n; ++i) {
      const float p = weight_of[static_cast<size_t>(e)][static_cast<size_t>(i)];
      float* o = out + rows[i] * hidden;
      const float* d = down.data() + i * hidden;
      for (int64_t j = 0; j < hidden; ++j) o[j] += p * d[j];
    }
  }
}

}  // namespace spark::cpu
