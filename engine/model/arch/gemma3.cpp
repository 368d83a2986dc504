// gemma3.cpp — Gemma 3's text model (Gemma3ForCausalLM, and Gemma3ForConditionalGeneration's
// text under "text_config" and "model.language_model.", the vision tower not read): the
// embedding scaled by sqrt(hidden_size); four RMSNorms a layer, weights used as (1 + w), in
// sandwich placement (x + post_norm(f(pre_norm(x))) for attention and for the MLP); q and k
// normed per head; queries scaled by query_pre_attn_scalar^-1/2; sliding-window and full
// layers as layer_types says, each kind with its own RoPE; a GELU-tanh gated MLP; a tied LM
// head, and final_logit_softcapping when set. GGUF files as llama.cpp writes them (gemma3).
#include <algorithm>
#include <string_view>

#include "engine/model/arch.h"
#include "engine/model/arch/checkpoint_names.h"
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"
#include "engine/util/log.h"

namespace spark {
namespace {

// transformers' Gemma3TextConfig defaults for the keys the readers need: published
// Gemma3ForConditionalGeneration configs leave most of them out of text_config.
constexpr const char* kDefaults = R"({
  "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
  "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-6, "query_pre_attn_scalar": 256, "sliding_window": 4096, "tie_word_embeddings": true,
  "hidden_activation": "gelu_pytorch_tanh", "bos_token_id": 2, "eos_token_id": 1
})";

// RoPE by layer type. Transformers 5 writes rope_parameters keyed by layer type
// ({"full_attention": {...}, "sliding_attention": {...}}); older configs give the full
// layers' rope_theta and rope_scaling and the sliding layers' base as rope_local_base_freq
// (never scaled). Defaults as transformers': 1e6 for full layers, 1e4 for sliding ones.
void read_rope(const ConfigReader& r, ModelSpec& s) {
  s.rope_theta = 1e6;
  s.sliding_rope_theta = 1e4;
  s.rope_scaling = s.sliding_rope_scaling = RopeScaling{};
  if (read_rope_by_layer_type(r, s)) return;
  RopeScaling full;
  double full_theta = r.number_or("rope_theta", s.rope_theta);
  const char* scaling_key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (r.has(scaling_key)) {
    if (!r.j[scaling_key].is_object()) r.fail(scaling_key, "must be an object");
    read_rope_scaling(ConfigReader{r.j[scaling_key], r.source}, s.max_position_embeddings, full);
    full_theta = ConfigReader{r.j[scaling_key], r.source}.number_or("rope_theta", full_theta);
  }
  const double sliding_theta = r.number_or("rope_local_base_freq", s.sliding_rope_theta);
  if (!(full_theta > 0)) r.fail("rope_theta", "must be positive");
  if (!(sliding_theta > 0)) r.fail("rope_local_base_freq", "must be positive");
  s.rope_theta = full_theta;
  s.rope_scaling = full;
  s.sliding_rope = true;
  s.sliding_rope_theta = sliding_theta;
}

void read_config(const ConfigReader& r, ModelSpec& s) {
  refuse_attention_and_mlp_bias(r, s);
  read_dense_mlp(r, s);
  s.norm_plus_one = s.sandwich_norms = s.gelu_tanh_mlp = s.qk_norm = s.scale_embedding = true;
  s.tie_word_embeddings = r.boolean_or("tie_word_embeddings", true);
  if (r.has("hidden_activation") && !(r.j["hidden_activation"].is_string() && r.j["hidden_activation"] == "gelu_pytorch_tanh"))
    r.fail("hidden_activation", "= " + r.j["hidden_activation"].dump() + " is not supported (supported: \"gelu_pytorch_tanh\")");
  s.query_pre_attn_scalar = r.number_or("query_pre_attn_scalar", 256);
  if (!(s.query_pre_attn_scalar > 0)) r.fail("query_pre_attn_scalar", "must be positive");
  s.final_logit_softcap = r.number_or("final_logit_softcapping", 0);
  if (r.has("final_logit_softcapping") && !(s.final_logit_softcap > 0))
    r.fail("final_logit_softcapping", "must be positive or null");
  // Gemma 2 capped the attention logits; transformers' Gemma 3 passes no cap to its
  // attention, and sparkd implements none: a config that sets one is refused, not ignored.
  if (r.has("attn_logit_softcapping"))
    r.fail("attn_logit_softcapping", "= " + r.j["attn_logit_softcapping"].dump() + " is not supported (only null)");
  if (r.boolean_or("use_bidirectional_attention", false))
    r.fail("use_bidirectional_attention", "= true (an embedding model's attention) is not supported");
  // transformers' default layer_types: every sliding_window_pattern-th layer is full.
  const int64_t pattern = r.integer_or("sliding_window_pattern", 1, MAX_LAYERS, 6);
  std::vector<uint8_t> sliding(static_cast<size_t>(s.num_layers));
  for (size_t l = 0; l < sliding.size(); ++l) sliding[l] = (int64_t(l) + 1) % pattern != 0;
  read_layer_types(r, s, sliding);
  read_rope(r, s);
}

// llama.cpp's gemma3 files name neither the layer types nor the query scale: its loader
// makes every 6th layer full (5, 11, ...; sliding_window_pattern, when a file has one, as a
// period or one flag a layer) and scales queries by 1/sqrt(hidden / heads) for the 27B (62
// layers) and 1/sqrt(head_dim) for the others; the sliding layers take rope.freq_base_swa
// (10000 where absent), unscaled, and the full layers rope.freq_base with the file's linear
// scaling (the shared reader). Norms are stored with the one added (taken back at load).
void read_gguf(const GgufMetaReader& m, ModelSpec& s) {
  read_dense_mlp(m, s);
  s.norm_plus_one = s.sandwich_norms = s.gelu_tanh_mlp = s.qk_norm = s.scale_embedding = true;
  s.query_pre_attn_scalar = s.num_layers == 62 ? double(s.hidden_size) / double(s.num_heads) : double(s.head_dim);
  s.final_logit_softcap = m.number("final_logit_softcapping", 0);
  if (m.f.find(m.arch + ".final_logit_softcapping") && !(s.final_logit_softcap > 0))
    m.fail(m.arch + ".final_logit_softcapping", "must be positive");
  s.layer_sliding.assign(size_t(s.num_layers), 0);
  const GgufValue* pattern = m.f.find(m.arch + ".attention.sliding_window_pattern");
  if (pattern && pattern->type == GgufType::ARRAY) {
    if (pattern->elem_type != GgufType::BOOL || int64_t(pattern->ints.size()) != s.num_layers)
      m.fail(m.arch + ".attention.sliding_window_pattern", "must hold one flag a layer (" + std::to_string(s.num_layers) + ")");
    for (size_t l = 0; l < s.layer_sliding.size(); ++l) s.layer_sliding[l] = pattern->ints[l] != 0;
  } else {
    const int64_t period = m.integer("attention.sliding_window_pattern", 1, MAX_LAYERS, 6);
    for (int64_t l = 0; l < s.num_layers; ++l) s.layer_sliding[size_t(l)] = l % period < period - 1;
  }
  if (std::find(s.layer_sliding.begin(), s.layer_sliding.end(), 1) != s.layer_sliding.end())
    s.sliding_window = m.integer("attention.sliding_window", 1, MAX_POSITIONS);
  s.sliding_rope = true;
  s.sliding_rope_theta = m.number("rope.freq_base_swa", 10000.0);
  if (!(s.sliding_rope_theta > 0)) m.fail(m.arch + ".rope.freq_base_swa", "must be positive");
}

// A file tensor's name in the shared table; nullopt for the vision tower and the projector
// into it. Gemma's post_attention_layernorm is the attention's sandwich norm, its
// pre_feedforward_layernorm the table's MLP norm (FFN_NORM).
std::optional<std::string> table_name(const std::string& file_name) {
  std::string name = file_name;
  for (std::string_view skip : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."})
    if (name.starts_with(skip)) return std::nullopt;
  // transformers 5 saves the text model as model.language_model.*, earlier versions as
  // language_model.model.* (and language_model.lm_head).
  for (std::string_view prefix : {"model.language_model.", "language_model.model."})
    if (name.starts_with(prefix)) name = "model." + name.substr(prefix.size());
  if (name.starts_with("language_model.lm_head.")) name = name.substr(std::string_view("language_model.").size());
  const std::optional<LayerName> in_layer = split_layer_name(name, "model.layers.");
  if (!in_layer) return name;
  if (in_layer->rest == "post_attention_layernorm.weight") return tensor_name(Part::POST_ATTN_NORM, in_layer->layer);
  if (in_layer->rest == "pre_feedforward_layernorm.weight") return tensor_name(Part::FFN_NORM, in_layer->layer);
  if (in_layer->rest == "post_feedforward_layernorm.weight") return tensor_name(Part::POST_FFN_NORM, in_layer->layer);
  return name;
}

std::map<std::string, Tensor> convert(const std::map<std::string, Tensor>& file, const ModelSpec&, LayerRange,
                                      Weights* keep, const std::string& source) {
  size_t skipped = 0;
  std::map<std::string, Tensor> out = renamed_tensors(file, table_name, source, &skipped);
  if (skipped > 0 && !keep)  // said once, when the model is inspected
    log_info("model: ", skipped, " tensors of the vision tower and its projector are not loaded with the model");
  return out;
}

}  // namespace

extern const Architecture kGemma3{
    .hf_class = "Gemma3ForCausalLM",
    .gguf_name = "gemma3",
    .config_defaults = kDefaults,
    .read_config = read_config,
    .read_gguf = read_gguf,
    .convert_checkpoint = convert,
    .needs_bf16_activations = true,
};

extern const Architecture kGemma3Multimodal{
    .hf_class = "Gemma3ForConditionalGeneration",
    .gguf_name = nullptr,
    .text_config = "text_config",
    .config_defaults = kDefaults,
    .read_config = read_config,
    .read_gguf = nullptr,
    .convert_checkpoint = convert,
    .needs_bf16_activations = true,
};

}  // namespace spark
