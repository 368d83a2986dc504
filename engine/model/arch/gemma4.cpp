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
// between layers) are refused by name. GGUF files as llama.cpp's converter writes them
// (gemma4): see read_gguf. Gemma 4's assistant (Gemma4AssistantForCausalLM), the drafter
// shipped beside each model, is a text model of the same kind whose layers read the model's
// K and V (read_assistant_config; engine/core/draft_model.h runs it).
#include <algorithm>
#include <cstring>
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

// What every Gemma 4 is, whatever its file says.
void set_gemma4(ModelSpec& s) {
  s.sandwich_norms = s.gelu_tanh_mlp = s.qk_norm = s.v_norm = s.scale_embedding = s.layer_scalar = true;
  s.query_pre_attn_scalar = 1.0;  // transformers' Gemma4TextAttention: scaling = 1.0
}

void set_experts(ModelSpec& s, int64_t experts, int64_t top_k, int64_t width) {
  s.num_experts = experts;
  s.num_experts_per_tok = top_k;
  s.moe_intermediate_size = width;
  s.norm_topk_prob = true;
  s.moe_beside_mlp = true;
}

// Gemma 4's text model; `assistant`: an assistant's, whose layers all read K and V.
void read_text_config(const ConfigReader& r, ModelSpec& s, bool assistant) {
  refuse_attention_and_mlp_bias(r, s);
  read_dense_mlp(r, s);
  set_gemma4(s);
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
  if (assistant && r.integer("num_kv_shared_layers", 0, MAX_LAYERS) != s.num_layers)
    r.fail("num_kv_shared_layers", "must be num_hidden_layers (" + std::to_string(s.num_layers) +
                                       "): every layer of an assistant reads the model's K and V");
  if (!assistant && r.integer_or("num_kv_shared_layers", 0, MAX_LAYERS, 0) != 0)
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
    if (assistant) r.fail("enable_moe_block", "= true is not an assistant's");
    const int64_t experts = r.integer("num_experts", 1, MAX_EXPERTS);
    set_experts(s, experts, r.integer("top_k_experts", 1, experts), r.integer("moe_intermediate_size", 1, MAX_DIM));
  }
}

void read_config(const ConfigReader& r, ModelSpec& s) { read_text_config(r, s, false); }

// Gemma 4's assistant (Gemma4AssistantForCausalLM): a Gemma 4 text model whose layers read
// the model's K and V, with backbone_hidden_size (the model's width) and, with
// use_ordered_embeddings, its vocabulary in num_centroids clusters of which the
// centroid_intermediate_top_k most likely get logits (ModelSpec::assistant_of_hidden).
void read_assistant_config(const ConfigReader& r, ModelSpec& s) {
  read_text_config(r, s, true);
  s.final_logit_softcap = 0;  // transformers' assistant takes its logits from the head as they are
  s.assistant_of_hidden = r.integer("backbone_hidden_size", 1, MAX_HIDDEN);
  if (s.sliding_window == 1) r.fail("sliding_window", "= 1 leaves an assistant's sliding layers nothing to read");
  if (!r.boolean_or("use_ordered_embeddings", false)) return;
  s.num_centroids = r.integer("num_centroids", 1, s.vocab_size);
  if (s.vocab_size % s.num_centroids != 0)
    r.fail("num_centroids", "must divide vocab_size (" + std::to_string(s.vocab_size) + ")");
  s.centroid_top_k = r.integer("centroid_intermediate_top_k", 1, s.num_centroids);
}

// The full layers' proportional RoPE as llama.cpp stores it: rope_freqs, a divisor per
// frequency pair of the full head, 1 for the pairs that turn and 1e30 (no turn) for the rest.
void read_rope_freqs(const GgufMetaReader& m, ModelSpec& s) {
  const GgufTensorInfo* t = m.f.find_tensor("rope_freqs.weight");
  if (!t) return;  // every pair turns
  const int64_t half = s.full_head_dim / 2;
  if (t->dtype != DType::F32 || t->shape != std::vector<int64_t>{half})
    m.fail("rope_freqs.weight", "must be F32 of " + std::to_string(half) + " values (half the full layers' key_length)");
  std::vector<float> div(static_cast<size_t>(half));
  std::memcpy(div.data(), m.f.tensor_data(*t), div.size() * sizeof(float));
  const auto turning = std::find_if(div.begin(), div.end(), [](float v) { return v != 1.0f; }) - div.begin();
  if (std::any_of(div.begin() + turning, div.end(), [](float v) { return !(v >= 1e29f); }))
    m.fail("rope_freqs.weight", "is not proportional RoPE (divisors 1 for the pairs that turn, then 1e30)");
  s.rope_scaling = RopeScaling{};
  s.rope_scaling.type = "proportional";
  s.rope_scaling.rotated_fraction = double(2 * turning) / double(s.full_head_dim);
}

// llama.cpp's gemma4 files (its converter's Gemma4Model): the layer types as one flag a layer
// (attention.sliding_window_pattern, true = sliding); attention.key_length the full layers'
// head width, key_length_swa the sliding ones'; head_count_kv one value a layer where the
// full layers have KV heads of their own; K = V where the full layers have no attn_v;
// rope.freq_base the full layers' base and rope.freq_base_swa the sliding ones', the
// proportional RoPE in rope_freqs; the norms stored as they are.
void read_gguf(const GgufMetaReader& m, ModelSpec& s) {
  read_dense_mlp(m, s);
  set_gemma4(s);
  s.final_logit_softcap = m.number("final_logit_softcapping", 0);
  if (m.f.find(m.arch + ".final_logit_softcapping") && !(s.final_logit_softcap > 0))
    m.fail(m.arch + ".final_logit_softcapping", "must be positive");
  if (m.integer("embedding_length_per_layer_input", 0, MAX_HIDDEN, 0) != 0)
    m.fail(m.arch + ".embedding_length_per_layer_input", "> 0 (per-layer input embeddings, Gemma 4 E2B / E4B) is not supported");
  if (m.integer("attention.shared_kv_layers", 0, MAX_LAYERS, 0) != 0)
    m.fail(m.arch + ".attention.shared_kv_layers", "> 0 (layers sharing KV, Gemma 4 E2B / E4B) is not supported");
  const std::string pattern_key = m.arch + ".attention.sliding_window_pattern";
  const GgufValue* pattern = m.f.find(pattern_key);
  if (!pattern || pattern->type != GgufType::ARRAY || pattern->elem_type != GgufType::BOOL ||
      int64_t(pattern->ints.size()) != s.num_layers)
    m.fail(pattern_key, "must hold one flag a layer (" + std::to_string(s.num_layers) + ")");
  s.layer_sliding.assign(pattern->ints.begin(), pattern->ints.end());
  if (std::find(s.layer_sliding.begin(), s.layer_sliding.end(), 1) != s.layer_sliding.end())
    s.sliding_window = m.integer("attention.sliding_window", 1, MAX_POSITIONS);
  // The shared reader took key_length, the full layers' width, as head_dim.
  s.full_head_dim = s.head_dim;
  s.head_dim = m.integer("attention.key_length_swa", 2, MAX_DIM, s.head_dim);
  if (m.integer("attention.value_length_swa", 1, MAX_DIM, s.head_dim) != s.head_dim)
    m.fail(m.arch + ".attention.value_length_swa", "differs from key_length_swa, which is not supported");
  if (s.head_dim % 2 != 0) m.fail(m.arch + ".attention.key_length_swa", "must be even");
  if (m.integer("rope.dimension_count_swa", 1, MAX_DIM, s.head_dim) != s.head_dim)
    m.fail(m.arch + ".rope.dimension_count_swa", "is not key_length_swa (partial rotary is not supported)");
  const std::vector<int64_t> kv = gguf_per_layer(m, "attention.head_count_kv", s.num_layers, s.num_heads);
  s.num_kv_heads = s.full_num_kv_heads = 0;
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const int64_t heads = kv[size_t(l)];
    if (heads < 1 || s.num_heads % heads != 0)
      m.fail(m.arch + ".attention.head_count_kv", "[" + std::to_string(l) + "] = " + std::to_string(heads) +
                                                      " does not divide head_count");
    int64_t& kind = s.layer_is_sliding(l) ? s.num_kv_heads : s.full_num_kv_heads;
    if (kind != 0 && kind != heads)
      m.fail(m.arch + ".attention.head_count_kv", "differs between layers of one type, which is not supported");
    kind = heads;
  }
  if (s.num_kv_heads == 0) s.num_kv_heads = s.full_num_kv_heads;  // no sliding layers
  const auto full = std::find(s.layer_sliding.begin(), s.layer_sliding.end(), 0);
  if (full != s.layer_sliding.end())
    s.full_k_eq_v = !m.f.find_tensor(gguf_tensor_name(Part::V, full - s.layer_sliding.begin()));
  s.sliding_rope = true;
  s.sliding_rope_theta = m.number("rope.freq_base_swa", 10000.0);
  if (!(s.sliding_rope_theta > 0)) m.fail(m.arch + ".rope.freq_base_swa", "must be positive");
  read_rope_freqs(m, s);
  if (m.f.find(m.arch + ".expert_count")) {
    const int64_t experts = m.integer("expert_count", 1, MAX_EXPERTS);
    set_experts(s, experts, m.integer("expert_used_count", 1, experts), m.integer("expert_feed_forward_length", 1, MAX_DIM));
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

// The tensors under the table's names, each layer's stacked experts (experts.gate_up_proj
// and experts.down_proj, with or without ".weight") split into views of each expert's rows.
std::map<std::string, Tensor> split_experts(const std::map<std::string, Tensor>& renamed, const ModelSpec& spec,
                                            const std::string& source) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : renamed) {
    std::optional<LayerName> in_layer = split_layer_name(name, "model.layers.");
    if (in_layer && in_layer->rest.ends_with(".weight")) in_layer->rest.resize(in_layer->rest.size() - 7);
    if (in_layer && (in_layer->rest == "experts.gate_up_proj" || in_layer->rest == "experts.down_proj")) {
      if (spec.num_experts == 0) throw InputError(source + ": tensor " + name + " holds experts, but enable_moe_block is off");
      if (in_layer->layer >= spec.num_layers) throw InputError(source + ": tensor " + name + " names no layer of the model");
      split_stacked_experts(t, name, in_layer->layer, in_layer->rest == "experts.gate_up_proj", spec, source, out);
      continue;
    }
    out.emplace(name, t);
  }
  return out;
}

std::map<std::string, Tensor> convert(const std::map<std::string, Tensor>& file, const ModelSpec& spec, LayerRange,
                                      Weights* keep, const std::string& source) {
  size_t skipped = 0;
  std::map<std::string, Tensor> out = split_experts(renamed_tensors(file, table_name, source, &skipped), spec, source);
  if (skipped > 0 && !keep)  // said once, when the model is inspected
    log_info("model: ", skipped, " tensors of the vision and audio towers are not loaded with the model");
  return out;
}

// llama.cpp keeps the experts' gate and up rows stacked in one tensor as the checkpoint does
// (ffn_gate_up_exps, under experts.gate_up_proj.weight here): split as the checkpoint's.
std::map<std::string, Tensor> convert_gguf(const std::map<std::string, Tensor>& file, const ModelSpec& spec, LayerRange,
                                           Weights*, const std::string& source) {
  return split_experts(file, spec, source);
}

}  // namespace

extern const Architecture kGemma4{
    .hf_class = "Gemma4ForCausalLM",
    .gguf_name = "gemma4",
    .config_defaults = kDefaults,
    .read_config = read_config,
    .read_gguf = read_gguf,
    .convert_checkpoint = convert,
    .gguf_fused = {{"ffn_gate_up_exps", "experts.gate_up_proj"}},
    .convert_gguf = convert_gguf,
    .gguf_kv_heads_per_layer = true,
    .needs_bf16_activations = true,
};

extern const Architecture kGemma4Assistant{
    .hf_class = "Gemma4AssistantForCausalLM",
    .gguf_name = nullptr,
    .text_config = "text_config",
    .config_defaults = kDefaults,
    .outer_keys = {"backbone_hidden_size", "use_ordered_embeddings", "num_centroids", "centroid_intermediate_top_k"},
    .read_config = read_assistant_config,
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
