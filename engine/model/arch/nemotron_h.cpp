// nemotron_h.cpp — Nemotron-H / Nemotron-3 (NemotronHForCausalLM): a stack of blocks, each
// x + f(norm(x)) with one f: a Mamba-2 mixer ("M"), attention without RoPE ("*"), a dense
// squared-ReLU MLP ("-") or an MoE of squared-ReLU experts beside a shared expert ("E"),
// as hybrid_override_pattern (or transformers 5's layers_block_type) lists them. The MoE's
// router takes the sigmoid of its logits, chooses by score + e_score_correction_bias and
// weighs by the scores (renormalised), times routed_scaling_factor; with moe_latent_size
// (Nemotron-3-Super's LatentMoE) the routed experts run on fc1_latent_proj(x) and their sum
// goes back through fc2_latent_proj. Each block is one layer of the shared table: a mixer
// block has no feed-forward, an MLP or MoE block no mixer. Checkpoints name tensors
// "backbone.layers.N.mixer.*"; they are renamed into the table.
// Super's MTP head (num_nextn_predict_layers, "mtp.*", as vLLM's NemotronHMTP reads it) is
// the blocks of mtp_hybrid_override_pattern ("*E": attention, then MoE), the first after
// eh_proj([enorm(embedding); hnorm(hidden)]), the last followed by final_layernorm; it is
// read for the head's spec only (ModelSpec::mtp_blocks).
// llama.cpp's GGUF files of it are read too (nemotron_h_gguf.cpp).
#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/arch/checkpoint_names.h"
#include "engine/model/arch/nemotron_h_gguf.h"
#include "engine/model/architecture.h"
#include "engine/model/spec_readers.h"
#include "engine/util/log.h"

namespace spark {

void set_nemotron_h_pattern(ModelSpec& s, const std::string& pattern) {
  const auto n = static_cast<size_t>(s.num_layers);
  s.layer_recurrent.assign(n, 0);
  s.layer_ffn_only.assign(n, 0);
  s.layer_mixer_only.assign(n, 0);
  s.mlp_only_layers.clear();
  for (size_t l = 0; l < n; ++l) {
    const char c = pattern[l];
    s.layer_recurrent[l] = c == 'M';
    s.layer_mixer_only[l] = c == 'M' || c == '*';
    s.layer_ffn_only[l] = c == '-' || c == 'E';
    if (c == '-') s.mlp_only_layers.push_back(int64_t(l));
  }
}

namespace {

// The pattern's letters and transformers' names for them.
char block_letter(const std::string& type) {
  if (type == "mamba" || type == "linear_attention") return 'M';
  if (type == "attention" || type == "full_attention") return '*';
  if (type == "mlp") return '-';
  if (type == "moe") return 'E';
  return '?';
}

// The block letters a config gives as a string (`pattern_key`) or, where that is absent, as
// transformers 5's list of block types (`list_key`); `key` is set to the one read. Each
// letter is one of `allowed` (what `what` says they are; a wrong one is named as the `unit`
// it is, layer or block). nullopt when neither key is given.
std::optional<std::string> read_blocks(const ConfigReader& r, const char* pattern_key, const char* list_key,
                                       std::string_view allowed, const std::string& what, const char* unit,
                                       const char*& key) {
  std::string pattern;
  key = pattern_key;
  if (r.has(key)) {
    if (!r.j[key].is_string()) r.fail(key, "must be a string of " + what);
    pattern = r.j[key].get<std::string>();
  } else {
    key = list_key;
    if (!r.has(key)) return std::nullopt;
    if (!r.j[key].is_array()) r.fail(key, "must list block types as strings");
    for (const auto& v : r.j[key]) {
      if (!v.is_string()) r.fail(key, "must list block types as strings");
      const char c = block_letter(v.get<std::string>());
      if (c == '?')
        r.fail(key, "holds \"" + v.get<std::string>() + "\"; known: mamba, attention, mlp, moe (or transformers 5's "
                    "linear_attention, full_attention)");
      pattern += c;
    }
  }
  for (size_t i = 0; i < pattern.size(); ++i)
    if (allowed.find(pattern[i]) == std::string_view::npos)
      r.fail(key, "has '" + std::string(1, pattern[i]) + "' at " + unit + " " + std::to_string(i) + "; " + what);
  return pattern;
}

std::string read_pattern(const ConfigReader& r, int64_t layers) {
  const char* key = nullptr;
  const std::optional<std::string> pattern = read_blocks(
      r, "hybrid_override_pattern", "layers_block_type", "M*-E",
      "each layer is M (Mamba-2), * (attention), - (MLP) or E (MoE)", "layer", key);
  if (!pattern) r.fail("hybrid_override_pattern", "is missing (nor is there a layers_block_type list)");
  if (int64_t(pattern->size()) != layers)
    r.fail(key, "has " + std::to_string(pattern->size()) + " blocks, but num_hidden_layers is " + std::to_string(layers));
  return *pattern;
}

// Super's MTP head: the blocks of one MTP step, attention, MLP or MoE (vLLM builds no other);
// transformers' default where the config names none: attention, then MoE.
std::string read_mtp_pattern(const ConfigReader& r) {
  const char* key = nullptr;
  const std::string pattern = read_blocks(r, "mtp_hybrid_override_pattern", "mtp_layers_block_type", "*-E",
                                          "an MTP block is * (attention), - (MLP) or E (MoE)", "block", key)
                                  .value_or("*E");
  if (pattern.empty() || pattern.size() > 16)
    r.fail(key, "has " + std::to_string(pattern.size()) + " blocks; an MTP head has 1 to 16");
  return pattern;
}

void read_config(const ConfigReader& r, ModelSpec& s) {
  const std::string pattern = read_pattern(r, s.num_layers);
  s.rms_norm_eps = r.number_or("layer_norm_epsilon", r.number_or("rms_norm_eps", 1e-5));
  if (!(s.rms_norm_eps > 0)) r.fail("layer_norm_epsilon", "must be positive");
  s.no_rope = true;
  s.relu2_mlp = true;
  for (const char* key : {"mlp_hidden_act"})
    if (r.has(key) && r.j[key] != "relu2") r.fail(key, "must be \"relu2\" (the only activation Nemotron-H uses)");
  if (r.has("mamba_hidden_act") && r.j["mamba_hidden_act"] != "silu")
    r.fail("mamba_hidden_act", "must be \"silu\"");
  for (const char* key : {"attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias"})
    if (r.boolean_or(key, false)) r.fail(key, "= true is not supported (Nemotron-3 checkpoints have no such biases)");

  set_nemotron_h_pattern(s, pattern);
  s.mtp_layers = r.integer_or("num_nextn_predict_layers", 0, 16, 0);
  if (s.mtp_layers > 0) s.mtp_blocks = read_mtp_pattern(r);
  const std::string blocks = pattern + s.mtp_blocks;
  const bool any_mamba = pattern.find('M') != std::string::npos, any_moe = blocks.find('E') != std::string::npos,
             any_mlp = blocks.find('-') != std::string::npos;

  if (any_mamba) {
    ModelSpec::Mamba2& m = s.mamba2;
    m.num_heads = r.integer("mamba_num_heads", 1, MAX_DIM);
    m.head_dim = r.integer("mamba_head_dim", 1, MAX_DIM);
    m.n_groups = r.integer_or("n_groups", 1, MAX_DIM, r.integer_or("mamba_n_groups", 1, MAX_DIM, 8));
    m.state_size = r.integer("ssm_state_size", 1, MAX_DIM);
    m.conv_kernel = r.integer_or("conv_kernel", 2, 64, r.integer_or("mamba_d_conv", 2, 64, 4));
    m.conv_bias = r.boolean_or("use_conv_bias", r.boolean_or("mamba_conv_bias", true));
    m.chunk_size = r.integer_or("chunk_size", 1, MAX_DIM, r.integer_or("mamba_chunk_size", 1, MAX_DIM, 128));
    // transformers' mixer clamps dt from below at time_step_min (its time_step_limit).
    m.dt_min = r.number_or("time_step_min", r.number_or("mamba_dt_min", 0.001));
    if (!(m.dt_min >= 0)) r.fail("time_step_min", "must not be negative");
    if (m.num_heads % m.n_groups != 0)
      r.fail("n_groups", "= " + std::to_string(m.n_groups) + " must divide mamba_num_heads = " +
                             std::to_string(m.num_heads));
    if (m.inner() > MAX_DIM || m.conv_dim() > MAX_DIM || m.num_heads * m.head_dim * m.state_size > (int64_t(1) << 26))
      r.fail("mamba_num_heads", "x mamba_head_dim x ssm_state_size is implausibly large");
  }
  if (any_mlp) s.intermediate_size = r.integer("intermediate_size", 1, MAX_DIM);
  if (any_moe) {
    const int64_t experts = r.integer_or("n_routed_experts", 1, MAX_EXPERTS, r.integer_or("num_local_experts", 1, MAX_EXPERTS, 0));
    if (experts == 0) r.fail("n_routed_experts", "is missing");
    s.num_experts = experts;
    s.num_experts_per_tok = r.integer("num_experts_per_tok", 1, experts);
    s.moe_intermediate_size = r.integer("moe_intermediate_size", 1, MAX_DIM);
    s.shared_expert_intermediate_size = r.integer_or("moe_shared_expert_intermediate_size", 0, MAX_DIM, 0);
    if (r.integer_or("n_shared_experts", 0, 1, 1) == 0) s.shared_expert_intermediate_size = 0;
    s.norm_topk_prob = r.boolean_or("norm_topk_prob", true);
    s.routed_scaling_factor = r.number_or("routed_scaling_factor", 1.0);
    s.decoder_sparse_step = 1;
    s.sigmoid_router = true;
    if (r.integer_or("n_group", 1, MAX_EXPERTS, 1) != 1 || r.integer_or("topk_group", 1, MAX_EXPERTS, 1) != 1)
      r.fail("n_group", "above 1 (group-limited routing) is not supported");
    s.moe_latent_size = r.integer_or("moe_latent_size", 1, MAX_DIM, 0);
  }
}

// A file tensor's name in the shared table, or "" for one the model does not read.
std::string table_name(const std::string& name, const ModelSpec& spec) {
  constexpr std::string_view kLayers = "backbone.layers.";
  if (name == "backbone.embeddings.weight" || name == "backbone.embedding.weight") return tensor_name(Part::EMBEDDING);
  if (name == "backbone.norm_f.weight") return tensor_name(Part::FINAL_NORM);
  if (name == "lm_head.weight") return name;
  const std::optional<LayerName> in_layer = split_layer_name(name, kLayers);
  if (!in_layer) return name;  // not part of the model: check_tensor_set names it
  const int64_t layer = in_layer->layer;
  const std::string& rest = in_layer->rest;
  const std::string prefix = "model.layers." + std::to_string(layer) + ".";
  if (layer >= spec.num_layers) return name;
  if (rest == "norm.weight")
    return tensor_name(spec.layer_has_mixer(layer) ? Part::ATTN_NORM : Part::FFN_NORM, layer);
  if (!rest.starts_with("mixer.")) return name;
  const std::string part = rest.substr(6);
  if (spec.layer_is_recurrent(layer)) return prefix + rest;  // the table's Mamba-2 names are "mixer.*"
  if (spec.layer_has_mixer(layer)) return prefix + "self_attn." + part;
  // A feed-forward block: the MLP, or the router, experts and shared expert of the MoE.
  if (part.starts_with("shared_experts.")) return prefix + "mlp.shared_expert." + part.substr(15);
  return prefix + "mlp." + part;
}

constexpr std::string_view kMtpLayers = "mtp.layers.";

// An MTP head's tensor (ModelSpec::mtp_head) in the table, or nullopt for one it does not
// read: block N of the head's first step ("mtp.layers.N.*") is the head's layer N, named as
// a model layer is; its fc and pre-fc norms are on the first block, its final norm on the
// last; the embedding and the LM head are the model's.
std::optional<std::string> head_table_name(const std::string& name, const ModelSpec& spec) {
  if (!name.starts_with("mtp.")) {
    const std::string table = table_name(name, spec);
    if (table == tensor_name(Part::EMBEDDING) || table == "lm_head.weight") return table;
    return std::nullopt;
  }
  const std::optional<LayerName> in_layer = split_layer_name(name, kMtpLayers);
  if (!in_layer || in_layer->layer >= spec.num_layers) return std::nullopt;  // a further step's blocks
  const int64_t layer = in_layer->layer;
  const std::string& rest = in_layer->rest;
  if (layer == 0 && rest == "eh_proj.weight") return tensor_name(Part::MTP_FC);
  if (layer == 0 && rest == "enorm.weight") return tensor_name(Part::MTP_EMBED_NORM);
  if (layer == 0 && rest == "hnorm.weight") return tensor_name(Part::MTP_HIDDEN_NORM);
  if (layer == spec.num_layers - 1 && rest == "final_layernorm.weight") return tensor_name(Part::FINAL_NORM);
  return table_name("backbone.layers." + std::to_string(layer) + "." + rest, spec);
}

std::map<std::string, Tensor> convert(const std::map<std::string, Tensor>& file, const ModelSpec& spec, LayerRange,
                                      Weights* keep, const std::string& source) {
  if (spec.mtp_head) {
    if (std::none_of(file.begin(), file.end(), [](const auto& t) { return t.first.starts_with("mtp."); }))
      throw InputError(source + " holds no MTP head tensors (mtp.*), though its config names num_nextn_predict_layers");
    return renamed_tensors(file, [&](const std::string& name) { return head_table_name(name, spec); }, source);
  }
  size_t skipped = 0;
  std::map<std::string, Tensor> out = renamed_tensors(
      file,
      [&](const std::string& name) -> std::optional<std::string> {
        if (name.starts_with("mtp.")) return std::nullopt;  // the MTP head's (read for its own spec)
        return table_name(name, spec);
      },
      source, &skipped);
  if (skipped > 0 && !keep)  // said once, when the model is inspected
    log_info("model: ", skipped, " tensors of the MTP head are not loaded with the model");
  return out;
}

// llama.cpp's names for the LatentMoE projections (fc1_latent_proj, fc2_latent_proj).
const std::vector<std::pair<const char*, const char*>> kGgufAliases = {{"ffn_latent_down", "ffn_latent_in"},
                                                                       {"ffn_latent_up", "ffn_latent_out"}};

// llama.cpp names the architecture nemotron_h, or nemotron_h_moe when the checkpoint has
// experts; both files read alike (nemotron_h_gguf.cpp).
Architecture row(const char* gguf_name) {
  return {
      .hf_class = "NemotronHForCausalLM",
      .gguf_name = gguf_name,
      .read_config = read_config,
      .read_gguf = read_nemotron_h_gguf,
      .convert_checkpoint = convert,
      .gguf_aliases = kGgufAliases,
      .convert_gguf = convert_nemotron_h_gguf,
      .gguf_qk_rows_permuted = true,
      .gguf_kv_heads_per_layer = true,
      .needs_bf16_activations = true,
  };
}

}  // namespace

extern const Architecture kNemotronH = row("nemotron_h");
extern const Architecture kNemotronHMoe = row("nemotron_h_moe");

}  // namespace spark
