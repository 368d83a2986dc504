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
  read_qwen_routed_experts(r, s, false);
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
