// qwen3_5.cpp — Qwen3.5 / Qwen3.6 (Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration):
// hybrids of Gated DeltaNet layers (a recurrent state per sequence) and full-attention
// layers with an output gate, q/k norm and partial rotary embeddings; zero-centred
// RMSNorm; a dense MLP, or routed experts beside a sigmoid-gated shared expert. The
// checkpoints are multimodal: the text model's settings sit under "text_config" and its
// weights under "model.language_model."; the vision tower is not read, and the MTP head
// ("mtp.*") only into the head's own spec (mtp_head_spec), which reads nothing else but
// the embedding and the LM head.
// GGUF files (llama.cpp's qwen35, qwen35moe) are read too: the loader undoes llama.cpp's
// norm offset and ssm_a, and the value heads stay tiled as the file has them; an MTP head
// there is the block after the layers (gguf_hf_tensors).
#include <algorithm>
#include <string_view>

#include "engine/model/arch.h"
#include "engine/model/arch/checkpoint_names.h"
#include "engine/model/arch/gated_delta_net_keys.h"
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"
#include "engine/util/log.h"

namespace spark {
namespace {

constexpr std::string_view kTextPrefix = "model.language_model.";
constexpr std::string_view kMtpPrefix = "mtp.";

// A file tensor's name in the shared table for `spec` (the text model or its MTP head),
// or "" when that spec does not read it: the vision tower, the head's tensors for the
// model, and everything but the embedding and the LM head for the head.
std::string table_name(const std::string& name, const ModelSpec& spec) {
  std::string text = name.starts_with(kTextPrefix) ? "model." + name.substr(kTextPrefix.size()) : name;
  if (text.starts_with("model.visual.")) return "";
  if (!spec.mtp_head) return name.starts_with(kMtpPrefix) ? "" : text;
  if (text == tensor_name(Part::EMBEDDING) || text == tensor_name(Part::LM_HEAD)) return text;
  if (!name.starts_with(kMtpPrefix)) return "";
  // mtp.layers.0.* and mtp.norm are the head's layer and final norm (further MTP layers,
  // which no published Qwen3.5 has, are not read); mtp.fc and the pre-fc norms are its own
  // parts, named so in the table.
  if (name.starts_with("mtp.layers."))
    return name.starts_with("mtp.layers.0.") ? "model." + name.substr(kMtpPrefix.size()) : "";
  if (name.starts_with("mtp.norm.")) return "model." + name.substr(kMtpPrefix.size());
  return name;
}

// The MTP head's layers, which the head's spec (mtp_head_spec) reads from "mtp.*".
void read_mtp(const ConfigReader& r, ModelSpec& s) { s.mtp_layers = r.integer_or("mtp_num_hidden_layers", 0, 16, 0); }

void read_dense(const ConfigReader& r, ModelSpec& s) {
  read_gated_delta_net_hybrid(r, s);
  read_mtp(r, s);
  read_dense_mlp(r, s);
}

// llama.cpp writes the MTP head as the blocks after the layers (read_gated_delta_net_hybrid
// takes them out of the layer count); gguf_hf_tensors reads them into the head's spec.
void read_mtp_gguf(const GgufMetaReader& m, ModelSpec& s) { s.mtp_layers = m.integer("nextn_predict_layers", 0, 16, 0); }

void read_dense_gguf(const GgufMetaReader& m, ModelSpec& s) {
  read_gated_delta_net_hybrid(m, s);
  read_mtp_gguf(m, s);
  read_dense_mlp(m, s);
}

// Every layer's routed experts (the router always renormalises its top k) and the shared
// expert; a dense MLP's width only where a file gives one.
void set_experts(ModelSpec& s, int64_t experts, int64_t used, int64_t width, int64_t shared_width, int64_t dense_width) {
  s.num_experts = experts;
  s.num_experts_per_tok = used;
  s.moe_intermediate_size = width;
  s.shared_expert_intermediate_size = shared_width;
  s.norm_topk_prob = true;
  s.decoder_sparse_step = 1;
  s.intermediate_size = dense_width;
}

void read_moe(const ConfigReader& r, ModelSpec& s) {
  read_gated_delta_net_hybrid(r, s);
  read_mtp(r, s);
  const int64_t experts = r.integer("num_experts", 1, MAX_EXPERTS);
  set_experts(s, experts, r.integer("num_experts_per_tok", 1, experts), r.integer("moe_intermediate_size", 1, MAX_DIM),
              r.integer_or("shared_expert_intermediate_size", 0, MAX_DIM, 0), r.integer_or("intermediate_size", 0, MAX_DIM, 0));
}

void read_moe_gguf(const GgufMetaReader& m, ModelSpec& s) {
  read_gated_delta_net_hybrid(m, s);
  read_mtp_gguf(m, s);
  const int64_t experts = m.integer("expert_count", 1, MAX_EXPERTS);
  set_experts(s, experts, m.integer("expert_used_count", 1, experts), m.integer("expert_feed_forward_length", 1, MAX_DIM),
              m.integer("expert_shared_feed_forward_length", 0, MAX_DIM, 0), m.integer("feed_forward_length", 0, MAX_DIM, 0));
}

// The file's tensors `spec` reads under the shared table's names (table_name), and stacked
// experts ([E, 2I, H] gate then up rows, [E, H, I] down) split into views of each expert's
// rows, which need no copy.
std::map<std::string, Tensor> convert(const std::map<std::string, Tensor>& file, const ModelSpec& spec,
                                      LayerRange, Weights* keep, const std::string& source) {
  std::map<std::string, Tensor> out;
  size_t skipped = 0;
  for (const auto& [name, tensor] : file) {
    Tensor t = tensor;
    t.name = table_name(name, spec);
    if (t.name.empty()) {
      ++skipped;
      continue;
    }
    constexpr std::string_view kLayers = "model.layers.", kExperts = ".mlp.experts.";
    const size_t experts_at = t.name.starts_with(kLayers) ? t.name.find(kExperts) : std::string::npos;
    const std::string tail = experts_at == std::string::npos ? "" : t.name.substr(experts_at + kExperts.size());
    if (tail == "gate_up_proj" || tail == "down_proj") {
      const std::string index = t.name.substr(kLayers.size(), experts_at - kLayers.size());
      if (index.empty() || index.size() > 4 || index.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(index) >= spec.num_layers)
        throw InputError(source + ": tensor " + name + " names no layer of the model");
      split_stacked_experts(t, name, std::stoll(index), tail == "gate_up_proj", spec, source, out);
      continue;
    }
    if (!out.emplace(t.name, t).second) throw InputError(source + ": tensor " + t.name + " appears twice");
  }
  if (spec.mtp_head && std::none_of(file.begin(), file.end(), [](const auto& t) { return t.first.starts_with(kMtpPrefix); }))
    throw InputError(source + " holds no MTP head tensors (mtp.*), though its config names mtp_num_hidden_layers");
  if (skipped > 0 && !keep && !spec.mtp_head)  // said once, when the model is inspected
    log_info("model: ", skipped, " tensors of the vision tower and the MTP head are not loaded with the model");
  return out;
}

// llama.cpp's names: the MLP's norm is post_attention_norm (the table's ffn_norm).
const std::vector<std::pair<const char*, const char*>> kGgufAliases = {{"post_attention_norm", "ffn_norm"}};

}  // namespace

extern const Architecture kQwen3_5{
    .hf_class = "Qwen3_5ForConditionalGeneration",
    .gguf_name = "qwen35",
    .text_config = "text_config",
    .read_config = read_dense,
    .read_gguf = read_dense_gguf,
    .convert_checkpoint = convert,
    .gguf_aliases = kGgufAliases,
    .gguf_partial_rotary = true,
    .needs_bf16_activations = true,
};

extern const Architecture kQwen3_5Moe{
    .hf_class = "Qwen3_5MoeForConditionalGeneration",
    .gguf_name = "qwen35moe",
    .text_config = "text_config",
    .read_config = read_moe,
    .read_gguf = read_moe_gguf,
    .convert_checkpoint = convert,
    .gguf_aliases = kGgufAliases,
    .gguf_partial_rotary = true,
    .needs_bf16_activations = true,
};

}  // namespace spark
