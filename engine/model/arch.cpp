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

namespace {
struct Counts {
  int64_t params = 0;
  int64_t tensors = 0;
};

Counts count(const ModelSpec& s, LayerRange range) {
  // Mirrors expected_tensors() above, in closed form.
  const int64_t h = s.hidden_size, hd = s.head_dim;
  const int64_t q_dim = s.num_heads * hd, kv_dim = s.num_kv_heads * hd;
  Counts c;
  bool last_stage = range.last_layer == s.num_layers;
  if (range.first_layer == 0 || (last_stage && s.tie_word_embeddings)) {
    c.params += s.vocab_size * h;
    c.tensors += 1;
  }
  int64_t attn = h + q_dim * h + 2 * kv_dim * h + h * q_dim + h, attn_tensors = 6;  // 2 norms, q k v o
  if (s.attention_bias) attn += q_dim + 2 * kv_dim, attn_tensors += 3;
  if (s.qk_norm) attn += 2 * hd, attn_tensors += 2;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) {
    c.params += attn;
    c.tensors += attn_tensors;
    if (s.layer_is_moe(l)) {
      c.params += s.num_experts * h + s.num_experts * 3 * s.moe_intermediate_size * h;
      c.tensors += 1 + 3 * s.num_experts;
    } else {
      c.params += 3 * s.intermediate_size * h;
      c.tensors += 3;
    }
  }
  if (last_stage) {
    c.params += h + (s.tie_word_embeddings ? 0 : s.vocab_size * h);
    c.tensors += s.tie_word_embeddings ? 1 : 2;
  }
  return c;
}
}  // namespace

int64_t parameter_count(const ModelSpec& s) { return count(s, full_range(s)).params; }
int64_t parameter_count(const ModelSpec& s, LayerRange range) {
  check_range(s, range);
  return count(s, range).params;
}
int64_t expected_tensor_count(const ModelSpec& s, LayerRange range) {
  check_range(s, range);
  return count(s, range).tensors;
}

}  // namespace spark
