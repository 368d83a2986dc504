// arch.cpp — expected tensor names and shapes of Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE.
#include "engine/model/arch.h"

#include "engine/util/check.h"

namespace spark {

LayerRange full_range(const ModelSpec& spec) { return LayerRange{0, spec.num_layers}; }

void check_range(const ModelSpec& spec, LayerRange r) {
  if (r.first_layer < 0 || r.first_layer >= r.last_layer || r.last_layer > spec.num_layers)
    throw InputError("layer range [" + std::to_string(r.first_layer) + ", " + std::to_string(r.last_layer) +
                     ") is not inside the model's " + std::to_string(spec.num_layers) + " layers");
}

std::vector<TensorSpec> expected_tensors(const ModelSpec& s, LayerRange range) {
  check_range(s, range);
  std::vector<TensorSpec> out;
  const int64_t h = s.hidden_size, hd = s.head_dim;
  const int64_t q_dim = s.num_heads * hd, kv_dim = s.num_kv_heads * hd;
  bool last_stage = range.last_layer == s.num_layers;
  if (range.first_layer == 0 || (last_stage && s.tie_word_embeddings))
    out.push_back({"model.embed_tokens.weight", {s.vocab_size, h}});
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {h}});
    out.push_back({p + "self_attn.q_proj.weight", {q_dim, h}});
    out.push_back({p + "self_attn.k_proj.weight", {kv_dim, h}});
    out.push_back({p + "self_attn.v_proj.weight", {kv_dim, h}});
    out.push_back({p + "self_attn.o_proj.weight", {h, q_dim}});
    if (s.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q_dim}});
      out.push_back({p + "self_attn.k_proj.bias", {kv_dim}});
      out.push_back({p + "self_attn.v_proj.bias", {kv_dim}});
    }
    if (s.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {hd}});
      out.push_back({p + "self_attn.k_norm.weight", {hd}});
    }
    out.push_back({p + "post_attention_layernorm.weight", {h}});
    if (s.layer_is_moe(l)) {
      const int64_t mi = s.moe_intermediate_size;
      out.push_back({p + "mlp.gate.weight", {s.num_experts, h}});
      for (int64_t e = 0; e < s.num_experts; ++e) {
        std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
        out.push_back({ep + "gate_proj.weight", {mi, h}});
        out.push_back({ep + "up_proj.weight", {mi, h}});
        out.push_back({ep + "down_proj.weight", {h, mi}});
      }
    } else {
      const int64_t ff = s.intermediate_size;
      out.push_back({p + "mlp.gate_proj.weight", {ff, h}});
      out.push_back({p + "mlp.up_proj.weight", {ff, h}});
      out.push_back({p + "mlp.down_proj.weight", {h, ff}});
    }
  }
  if (last_stage) {
    out.push_back({"model.norm.weight", {h}});
    if (!s.tie_word_embeddings) out.push_back({"lm_head.weight", {s.vocab_size, h}});
  }
  return out;
}

int64_t parameter_count(const ModelSpec& s) {
  // Counted from the shapes in closed form, so a 235B MoE does not need its tensor list.
  const int64_t h = s.hidden_size, hd = s.head_dim;
  const int64_t q_dim = s.num_heads * hd, kv_dim = s.num_kv_heads * hd;
  int64_t per_attn = h + q_dim * h + 2 * kv_dim * h + h * q_dim + h;
  if (s.attention_bias) per_attn += q_dim + 2 * kv_dim;
  if (s.qk_norm) per_attn += 2 * hd;
  int64_t n = s.vocab_size * h * (s.tie_word_embeddings ? 1 : 2) + h;
  for (int64_t l = 0; l < s.num_layers; ++l) {
    n += per_attn;
    if (s.layer_is_moe(l))
      n += s.num_experts * h + s.num_experts * 3 * s.moe_intermediate_size * h;
    else
      n += 3 * s.intermediate_size * h;
  }
  return n;
}

}  // namespace spark
