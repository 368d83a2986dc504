// qwen3_moe.cpp — Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention with a mixture of
// experts every decoder_sparse_step layers, except the mlp_only_layers; trained in BF16.
#include "engine/model/arch/shared_keys.h"
#include "engine/model/arch.h"
#include "engine/model/architecture.h"

namespace spark {
namespace {

void read_config(const ConfigReader& r, ModelSpec& s) {
  s.qk_norm = true;
  refuse_attention_and_mlp_bias(r, s);
  cap_context_at_sliding_window(r, s, false);
  // Transformers 5 writes "num_local_experts"; published Qwen3-MoE configs say "num_experts".
  s.num_experts = r.has("num_experts") ? r.integer("num_experts", 1, MAX_EXPERTS)
                                       : r.integer("num_local_experts", 1, MAX_EXPERTS);
  s.num_experts_per_tok = r.integer("num_experts_per_tok", 1, s.num_experts);
  s.moe_intermediate_size = r.integer("moe_intermediate_size", 1, MAX_DIM);
  s.norm_topk_prob = r.boolean_or("norm_topk_prob", false);
  s.decoder_sparse_step = r.integer_or("decoder_sparse_step", 1, MAX_LAYERS, 1);
  if (r.has("mlp_only_layers")) {
    const nlohmann::json& layers = r.j["mlp_only_layers"];
    if (!layers.is_array()) r.fail("mlp_only_layers", "must be a list of layer indices");
    for (const nlohmann::json& x : layers) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= s.num_layers)
        r.fail("mlp_only_layers", "holds " + x.dump() + ", not a layer index");
      s.mlp_only_layers.push_back(x.get<int64_t>());
    }
  }
  bool any_dense = false;
  for (int64_t l = 0; l < s.num_layers; ++l) any_dense = any_dense || !s.layer_is_moe(l);
  s.intermediate_size = any_dense ? r.integer("intermediate_size", 1, MAX_DIM)
                                  : r.integer_or("intermediate_size", 1, MAX_DIM, 0);
}

void read_gguf(const GgufMetaReader& m, ModelSpec& s) {
  s.qk_norm = true;
  s.num_experts = m.integer("expert_count", 1, MAX_EXPERTS);
  s.num_experts_per_tok = m.integer("expert_used_count", 1, s.num_experts);
  s.moe_intermediate_size = m.integer("expert_feed_forward_length", 1, MAX_DIM);
  // llama.cpp always renormalises the top-k weights for qwen3moe.
  s.norm_topk_prob = m.f.get_bool(m.arch + ".expert_weights_norm").value_or(true);
  s.intermediate_size = m.integer("feed_forward_length", 0, MAX_DIM, 0);
  // GGUF has no mlp_only_layers key: a layer stored with a dense MLP and no router is one.
  for (int64_t l = 0; l < s.num_layers; ++l)
    if (!m.f.find_tensor(gguf_tensor_name(Part::ROUTER, l)) && m.f.find_tensor(gguf_tensor_name(Part::GATE, l)))
      s.mlp_only_layers.push_back(l);
  if (!s.mlp_only_layers.empty() && s.intermediate_size == 0)
    m.fail(m.arch + ".feed_forward_length", "is needed for the dense layers");
}

}  // namespace

extern const Architecture kQwen3Moe{
    .hf_class = "Qwen3MoeForCausalLM",
    .gguf_name = "qwen3moe",
    .read_config = read_config,
    .read_gguf = read_gguf,
    .needs_bf16_activations = true,
};

}  // namespace spark
