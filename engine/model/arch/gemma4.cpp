// gemma4.cpp — Gemma 4's text model (Gemma4ForCausalLM, and Gemma4ForConditionalGeneration's
// text under "text_config" and "model.language_model.", the vision and audio towers not read):
// the 31B dense and 26B-A4B MoE shapes. As transformers' modeling_gemma4 defines them:
// sliding and full ("global") layers as layer_types says, the full ones with their own head
// width (global_head_dim) and, where attention_k_eq_v, their own KV heads
// (num_global_key_value_heads) and no v_proj (the value is the key projection); RoPE per
// layer type, the full layers' proportional; q and k normed per head, v by a weightless
// RMSNorm; attention scale 1; four RMSNorms a layer with weights as stored, in sandwich
// placement; a GELU-tanh gated MLP; each layer's output times its layer_scalar; the
// embedding scaled by sqrt(hidden_size), a tied head and the final logit soft cap. With
// enable_moe_block, every layer's dense MLP and routed experts run side by side
// (ModelSpec::moe_beside_mlp). The E2B / E4B shapes (per-layer input embeddings, KV shared
// between layers) are refused by name.
#include <string_view>

#include "engine/model/arch.h"
#include "engine/model/arch/checkpoint_names.h"
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"
#include "engine/util/log.h"

namespace spark {
namespace {

// transformers' Gemma4TextConfig defaults for the keys the readers need (global_head_dim's
// is its __post_init__'s), for configs that leave them out of text_config.
constexpr const char* kDefaults = R"({
  "vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
  "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "global_head_dim": 512,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-6, "sliding_window": 512, "tie_word_embeddings": true,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size_per_layer_input": 256, "bos_token_id": 2, "eos_token_id": 1,
  "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                      "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}
})";

void read_config(const ConfigReader& r, ModelSpec& s) {
  refuse_attention_and_mlp_bias(r, s);
  read_dense_mlp(r, s);
  s.sandwich_norms = s.gelu_tanh_mlp = s.qk_norm = s.v_norm = s.scale_embedding = s.layer_scalar = true;
  s.query_pre_attn_scalar = 1.0;  // transformers' Gemma4TextAttention: scaling = 1.0
  s.tie_word_embeddings = r.boolean_or("tie_word_embeddings", true);
  if (r.has("hidden_activation") && !(r.j["hidden_activation"].is_string() && r.j["hidden_activation"] == "gelu_pytorch_tanh"))
    r.fail("hidden_activation", "= " + r.j["hidden_activation"].dump() + " is not supported (supported: \"gelu_pytorch_tanh\")");
  s.final_logit_softcap = r.number_or("final_logit_softcapping", 0);
  if (r.has("final_logit_softcapping") && !(s.final_logit_softcap > 0))
    r.fail("final_logit_softcapping", "must be positive or null");
  // The E2B / E4B shapes: a second embedding feeding every layer, layers reading the KV of
  // earlier ones, a double-wide MLP there. Refused, not ignored.
  if (r.integer_or("hidden_size_per_layer_input", 0, MAX_HIDDEN, 0) != 0)
    r.fail("hidden_size_per_layer_input", "> 0 (per-layer input embeddings, Gemma 4 E2B / E4B) is not supported");
  if (r.integer_or("num_kv_shared_layers", 0, MAX_LAYERS, 0) != 0)
    r.fail("num_kv_shared_layers", "> 0 (layers sharing KV, Gemma 4 E2B / E4B) is not supported");
  if (r.boolean_or("use_double_wide_mlp", false)) r.fail("use_double_wide_mlp", "= true is not supported");
  if (r.has("use_bidirectional_attention") && r.j["use_bidirectional_attention"] != "vision")
    r.fail("use_bidirectional_attention", "= " + r.j["use_bidirectional_attention"].dump() +
                                              " is not supported (text attends causally; \"vision\" and null are read)");
  // transformers' default layer_types: every 6th layer full.
  std::vector<uint8_t> sliding(static_cast<size_t>(s.num_layers));
  for (size_t l = 0; l < sliding.size(); ++l) sliding[l] = (int64_t(l) + 1) % 6 != 0;
  read_layer_types(r, s, sliding);
  // The full layers' geometry: global_head_dim always; num_global_key_value_heads and no
  // v_proj only with attention_k_eq_v (transformers' per_layer_config).
  s.full_head_dim = r.integer("global_head_dim", 1, MAX_DIM);
  s.full_k_eq_v = r.boolean_or("attention_k_eq_v", false);
  if (s.full_k_eq_v && r.has("num_global_key_value_heads")) {
    s.full_num_kv_heads = r.integer("num_global_key_value_heads", 1, s.num_heads);
    if (s.num_heads % s.full_num_kv_heads != 0)
      r.fail("num_global_key_value_heads", "must divide num_attention_heads (" + std::to_string(s.num_heads) + ")");
  }
  s.rope_theta = 1e6;
  s.sliding_rope_theta = 1e4;
  s.rope_scaling = s.sliding_rope_scaling = RopeScaling{};
  if (!read_rope_by_layer_type(r, s))
    r.fail("rope_parameters", "must give the RoPE of each layer type (full_attention, sliding_attention)");
  if (r.boolean_or("enable_moe_block", false)) {
    const int64_t experts = r.integer("num_experts", 1, MAX_EXPERTS);
    s.num_experts = experts;
    s.num_experts_per_tok = r.integer("top_k_experts", 1, experts);
    s.moe_intermediate_size = r.integer("moe_intermediate_size", 1, MAX_DIM);
    s.norm_topk_prob = true;
    s.moe_beside_mlp = true;
  }
}

// A file tensor's name in the shared table; nullopt for the vision and audio towers and
// their projectors. Gemma's post_attention_layernorm is the attention's sandwich norm, its
// pre_feedforward_layernorm the table's MLP norm (FFN_NORM); the router is router.proj and
// the experts come stacked (experts.gate_up_proj, experts.down_proj).
std::optional<std::string> table_name(const std::string& file_name) {
  std::string name = file_name;
  for (std::string_view skip : {"model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio."})
    if (name.starts_with(skip)) return std::nullopt;
  if (name.starts_with("model.language_model.")) name = "model." + name.substr(std::string_view("model.language_model.").size());
  const std::optional<LayerName> in_layer = split_layer_name(name, "model.layers.");
  if (!in_layer) return name;
  const std::string& rest = in_layer->rest;
  if (rest == "post_attention_layernorm.weight") return tensor_name(Part::POST_ATTN_NORM, in_layer->layer);
  if (rest == "pre_feedforward_layernorm.weight") return tensor_name(Part::FFN_NORM, in_layer->layer);
  if (rest == "router.proj.weight") return tensor_name(Part::ROUTER, in_layer->layer);
  return name;
}

std::map<std::string, Tensor> convert(const std::map<std::string, Tensor>& file, const ModelSpec& spec, LayerRange,
                                      Weights* keep, const std::string& source) {
  size_t skipped = 0;
  std::map<std::string, Tensor> renamed = renamed_tensors(file, table_name, source, &skipped);
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : renamed) {
    const std::optional<LayerName> in_layer = split_layer_name(name, "model.layers.");
    if (in_layer && (in_layer->rest == "experts.gate_up_proj" || in_layer->rest == "experts.down_proj")) {
      if (spec.num_experts == 0) throw InputError(source + ": tensor " + name + " holds experts, but enable_moe_block is off");
      if (in_layer->layer >= spec.num_layers) throw InputError(source + ": tensor " + name + " names no layer of the model");
      split_stacked_experts(t, name, in_layer->layer, in_layer->rest == "experts.gate_up_proj", spec, source, out);
      continue;
    }
    out.emplace(name, t);
  }
  if (skipped > 0 && !keep)  // said once, when the model is inspected
    log_info("model: ", skipped, " tensors of the vision and audio towers are not loaded with the model");
  return out;
}

}  // namespace

extern const Architecture kGemma4{
    .hf_class = "Gemma4ForCausalLM",
    .gguf_name = nullptr,
    .config_defaults = kDefaults,
    .read_config = read_config,
    .read_gguf = nullptr,
    .convert_checkpoint = convert,
    .needs_bf16_activations = true,
};

extern const Architecture kGemma4Multimodal{
    .hf_class = "Gemma4ForConditionalGeneration",
    .gguf_name = nullptr,
    .text_config = "text_config",
    .config_defaults = kDefaults,
    .read_config = read_config,
    .read_gguf = nullptr,
    .convert_checkpoint = convert,
    .needs_bf16_activations = true,
};

}  // namespace spark
