// assistant.cpp — Gemma 4's assistant on the CPU backend (ModelSpec::assistant_of_hidden): the
// drafter reads its model's embedding and K and V in place, through the model's backend.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/matmul.h"
#include "engine/step/window_blocks.h"
#include "engine/util/check.h"

namespace spark {

void CpuBackend::attach_model(const Backend& model) {
  if (!spec_.is_assistant()) throw InputError("only Gemma 4's assistant reads the model it drafts for");
  const auto* m = dynamic_cast<const CpuBackend*>(&model);
  if (!m) throw InputError("Gemma 4's assistant runs on the CPU backend beside a model on it, not beside " + model.describe());
  if (m->range_.first_layer != 0 || m->range_.last_layer != m->spec_.num_layers)
    throw InputError("Gemma 4's assistant reads the model's last layers and its embedding: one box must hold the whole model");
  std::vector<int64_t> reads = assistant_model_layers(m->spec_, spec_);
  model_ = m;
  model_layer_ = std::move(reads);
}

// Row t: ASSIST_IN . [the model's embedding of token t, times sqrt(its width) as the model
// scales it; hidden_in's row t].
void CpuBackend::embed_assistant_input(const Batch& batch, const float* hidden_in, float* x) {
  if (!model_) throw InputError("Gemma 4's assistant runs beside its model, and none was attached");
  if (!hidden_in) throw InputError("Gemma 4's assistant runs on the model's hidden states, and none came with the batch");
  const int64_t T = batch.num_tokens(), W = spec_.assistant_of_hidden;
  const float scale = model_->spec_.scale_embedding ? static_cast<float>(std::sqrt(static_cast<double>(W))) : 1.0f;
  if (assist_rows_.size() < size_t(T * 2 * W)) assist_rows_.resize(size_t(T * 2 * W));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = batch.token_ids[static_cast<size_t>(t)];
    SPARK_CHECK(id >= 0 && id < spec_.vocab_size, "token id outside the vocabulary: admission checks prompts");
    float* row = assist_rows_.data() + t * 2 * W;
    cpu::decode_row(*model_->embedding_, id, row);
    for (int64_t i = 0; i < W; ++i) row[i] *= scale;
    std::copy_n(hidden_in + t * W, W, row + W);
  }
  cpu::matmul(*pool_, assist_rows_.data(), T, *assist_in_, x);
}

void CpuBackend::assistant_hidden(const float* h, int64_t R, std::vector<float>& out) {
  std::vector<float> back(static_cast<size_t>(R * spec_.assistant_of_hidden));
  if (R > 0) cpu::matmul(*pool_, h, R, *assist_out_, back.data());
  out = std::move(back);
}

// Queries (q_proj, q_norm, RoPE at the row's position) over the K and V the model's layer
// holds for the first context_lens tokens of the row's sequence, through its block table.
void CpuBackend::attend_model_kv(int64_t index, const Batch& batch, float* h) {
  const Layer& L = layers_[static_cast<size_t>(index)];
  ThreadPool& pool = *pool_;
  const int64_t T = batch.num_tokens(), hd = L.head_dim, nh = spec_.num_heads;
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  cpu::matmul(pool, h, T, *L.q, q_.data());
  for (int64_t t = 0; t < T; ++t) {
    float* q = q_.data() + t * nh * hd;
    for (int64_t i = 0; i < nh; ++i) cpu::rms_norm(q + i * hd, L.q_norm.data(), hd, eps, q + i * hd);
    ropes_[L.rope_index].apply(q, nh, batch.positions[static_cast<size_t>(t)]);
  }
  const int64_t m = model_layer_[static_cast<size_t>(index)];
  const cpu::KvGeometry g = model_->layer_kv(m);
  // A window cache holds the sliding layers' K and V of recent blocks only: the rows must
  // not reach past them (they read window - 1 tokens, which the model's next query reads too).
  if (L.window > 0 && g.num_blocks < model_->kv_.num_blocks) check_window_blocks(batch, g.num_blocks, g.block_size, L.window);
  cpu::attention(pool, batch, g, nh, q_.data(), model_->cache_[static_cast<size_t>(m)], att_.data(),
                 {L.window, nullptr, /*causal=*/true, L.attention_scale});
  cpu::matmul(pool, att_.data(), T, *L.o, h);
}

// transformers' Gemma4AssistantMaskedEmbedder: the centroids score the clusters, the
// centroid_top_k best clusters' tokens get their logits from the head, every other token
// the smallest of those minus 1 (so sampling never picks it).
void CpuBackend::clustered_logits(const float* h, int64_t R, float* logits) {
  const int64_t V = spec_.vocab_size, C = spec_.num_centroids, K = spec_.centroid_top_k, H = spec_.hidden_size;
  const int64_t per = V / C;
  std::vector<float> scores(static_cast<size_t>(R * C)), head_row(static_cast<size_t>(H));
  cpu::matmul(*pool_, h, R, *centroids_, scores.data());
  std::vector<int32_t> best(static_cast<size_t>(C));
  std::vector<uint8_t> chosen(static_cast<size_t>(V));
  for (int64_t r = 0; r < R; ++r) {
    const float* s = scores.data() + r * C;
    for (int32_t c = 0; c < int32_t(C); ++c) best[size_t(c)] = c;
    std::partial_sort(best.begin(), best.begin() + K, best.end(),
                      [s](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    float* out = logits + r * V;
    std::fill(chosen.begin(), chosen.end(), 0);
    float low = std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < per; ++i) {
        const int32_t id = token_order_[size_t(best[size_t(k)] * per + i)];
        cpu::decode_row(*lm_head_, id, head_row.data());
        float dot = 0.0f;
        for (int64_t j = 0; j < H; ++j) dot += h[r * H + j] * head_row[size_t(j)];
        out[id] = dot;
        chosen[size_t(id)] = 1;
        low = std::min(low, dot);
      }
    for (int64_t v = 0; v < V; ++v)
      if (!chosen[size_t(v)]) out[v] = low - 1.0f;
  }
}

}  // namespace spark
