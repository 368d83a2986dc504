// check.cpp — `sparkd check`: validate the config and model files, print the spec and
// the memory plan, allocate nothing.
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "engine/backend/box_plan.h"
#include "engine/backend/stage_loader.h"
#include "engine/commands/commands.h"
#include "engine/commands/device_plan.h"
#include "engine/config.h"
#include "engine/model/dummy.h"
#include "engine/peer/probe.h"
#include "engine/util/check.h"
#include "engine/util/flags.h"

namespace spark {
namespace {

std::string describe_spec(const ModelInfo& info) {
  const ModelSpec& s = info.spec;
  std::ostringstream o;
  o << "model\n";
  o << "  path             " << info.path << " (" << model_format_name(info.format) << ")\n";
  o << "  architecture     " << s.architecture << "\n";
  o << "  layers           " << s.num_layers << ", hidden " << s.hidden_size;
  if (s.intermediate_size > 0) o << ", intermediate " << s.intermediate_size;
  o << "\n  attention        " << s.num_heads << " heads, " << s.num_kv_heads << " kv heads, head_dim "
    << s.head_dim << (s.attention_bias ? ", qkv bias" : "") << (s.qk_norm ? ", q/k norm" : "")
    << (s.attn_output_gate ? ", output gate" : "") << (s.norm_plus_one ? ", norms (1 + w)" : "")
    << (s.v_norm ? ", v norm" : "");
  if (s.full_head_dim > 0)  // Gemma 4: the full-attention layers' own shape
    o << "; full layers " << (s.full_num_kv_heads > 0 ? s.full_num_kv_heads : s.num_kv_heads) << " kv heads, head_dim " << s.full_head_dim
      << (s.full_k_eq_v ? ", K = V" : "");
  o << "\n";
  if (!s.layer_ffn_only.empty()) {  // Nemotron-H: one block a layer
    std::string pattern;
    for (int64_t l = 0; l < s.num_layers; ++l)
      pattern += !s.layer_has_mixer(l) ? (s.layer_is_moe(l) ? 'E' : '-') : s.layer_is_recurrent(l) ? 'M' : '*';
    o << "  blocks           " << pattern << " (M Mamba-2, * attention, - MLP, E experts; one a layer)\n";
  }
  if (s.mamba2_layers()) {
    const ModelSpec::Mamba2& m = s.mamba2;
    const auto recurrent = std::count(s.layer_recurrent.begin(), s.layer_recurrent.end(), 1);
    o << "  mamba-2          " << recurrent << " of " << s.num_layers << " layers; " << m.num_heads << " heads x "
      << m.head_dim << ", " << m.n_groups << " groups, state " << m.state_size << ", conv kernel " << m.conv_kernel
      << "\n";
  } else if (s.has_recurrent_layers()) {
    const ModelSpec::DeltaNet& d = s.delta_net;
    const auto recurrent = std::count(s.layer_recurrent.begin(), s.layer_recurrent.end(), 1);
    o << "  gated deltanet   " << recurrent << " of " << s.num_layers << " layers; " << d.num_k_heads << " key heads x "
      << d.k_head_dim << ", " << d.num_v_heads << " value heads x " << d.v_head_dim << ", conv kernel "
      << d.conv_kernel << "\n";
  }
  if (s.encoder)
    o << "  encoder          bidirectional attention, post-norm LayerNorm, GELU; learned positions (" << s.position_rows
      << " rows from row " << s.position_offset << ")" << (s.type_vocab_size > 0 ? ", token type 0" : "") << "\n";
  if (s.encoder) o << "  rope             none";
  else if (s.no_rope) o << "  rope             none (attention without positions)";
  else o << "  rope             theta " << s.rope_theta;
  if (s.rotary_dim > 0 && s.rotary_dim != s.head_dim) o << ", " << s.rotary_dim << " of " << s.head_dim << " dims rotate";
  if (!s.rope_scaling.type.empty()) {
    o << ", " << s.rope_scaling.type << " scaling factor " << s.rope_scaling.factor;
    if (s.rope_scaling.type == "proportional") o << " (" << s.rope_scaling.rotated_fraction << " of the pairs turn)";
    if (s.rope_scaling.type == "llama3")
      o << " (low " << s.rope_scaling.low_freq_factor << ", high " << s.rope_scaling.high_freq_factor
        << ", original " << s.rope_scaling.original_max_position_embeddings << ")";
  }
  if (s.sliding_rope)
    o << "; sliding layers theta " << s.sliding_rope_theta
      << (s.sliding_rope_scaling.type.empty() ? "" : ", " + s.sliding_rope_scaling.type + " scaling");
  if (s.sandwich_norms || s.gelu_tanh_mlp || s.scale_embedding || s.query_pre_attn_scalar > 0 || s.final_logit_softcap > 0) {
    o << "\n  layer            " << (s.sandwich_norms ? "sandwich norms" : "pre-norm")
      << (s.gelu_tanh_mlp ? ", GELU (tanh) MLP" : "") << (s.scale_embedding ? ", embedding x sqrt(hidden)" : "");
    if (s.query_pre_attn_scalar == 1.0) o << ", attention scale 1";
    else if (s.query_pre_attn_scalar > 0) o << ", queries x " << s.query_pre_attn_scalar << "^-1/2";
    if (s.final_logit_softcap > 0) o << ", logits capped at " << s.final_logit_softcap;
    if (s.layer_scalar) o << ", layer output scalars";
  }
  o << "\n  vocab            " << s.vocab_size
    << (s.pooled ? ", no LM head (an embedder or reranker)" : s.tie_word_embeddings ? ", tied embeddings" : "") << "\n";
  o << "  max positions    " << s.max_position_embeddings << (s.encoder ? ", layer_norm_eps " : ", rms_norm_eps ")
    << s.rms_norm_eps << "\n";
  if (s.num_experts > 0) {
    o << "  experts          " << s.num_experts << ", top " << s.num_experts_per_tok << ", moe_intermediate "
      << s.moe_intermediate_size << ", norm_topk_prob " << (s.norm_topk_prob ? "true" : "false")
      << ", decoder_sparse_step " << s.decoder_sparse_step;
    if (!s.mlp_only_layers.empty()) o << ", " << s.mlp_only_layers.size() << " dense layers";
    if (s.shared_expert_intermediate_size > 0) o << ", shared expert " << s.shared_expert_intermediate_size;
    if (s.sigmoid_router) o << ", sigmoid router x " << s.routed_scaling_factor;
    if (s.moe_latent_size > 0) o << ", latent " << s.moe_latent_size;
    if (s.relu2_mlp) o << ", relu^2";
    if (s.moe_beside_mlp) o << ", beside each layer's dense MLP";
    o << "\n";
  }
  o << "  special tokens   bos " << s.bos_token_id << ", eos [";
  for (size_t i = 0; i < s.eos_token_ids.size(); ++i) o << (i ? ", " : "") << s.eos_token_ids[i];
  o << "]\n  dtype            " << dtype_name(s.dtype);
  if (!info.tensors.empty()) {
    // The model's own tensors: scales, sidecars and heads it does not load are not weights.
    std::map<std::string, int> counts;
    for (const TensorSpec& t : expected_tensors(s, full_range(s)))
      if (const auto it = info.tensors.find(t.name); it != info.tensors.end()) ++counts[std::string(dtype_name(it->second.dtype))];
    o << " (tensors stored as";
    for (const auto& [d, n] : counts) o << " " << d << " x" << n;
    o << ")";
  } else if (info.format == ModelFormat::DUMMY) {
    o << " (dummy weights in " << dtype_name(info.weight_dtype) << ", no weight file read)";
  }
  if (info.quantize.active()) {
    // What [model] quantize changes: the tensors it quantizes, by their stored type.
    std::map<std::string, int> counts;
    for (const TensorSpec& t : expected_tensors(s, full_range(s))) {
      const DType stored = info.format == ModelFormat::DUMMY ? dummy_tensor_dtype(s, t, info.weight_dtype)
                                                             : info.tensors.at(t.name).dtype;
      if (t.shape.size() == 2 && served_dtype(info.quantize, s, t.part, stored, t.shape.back()) != stored)
        ++counts[std::string(dtype_name(stored))];
    }
    o << "\n  quantize         " << describe_quantization(info.quantize) << " at load:";
    if (counts.empty()) o << " no tensor (none is a 16-bit or f32 matrix of those parts)";
    for (const auto& [d, n] : counts) o << " " << d << " x" << n;
  }
  o << "\n  tokenizer        " << info.tokenizer_path << "\n";
  return o.str();
}

// A TOML basic string holding `s`.
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Several models ([[models]]): each one's spec and plan under its name and role, then the
// box's total against its budget; exit 2 (an InputError) naming the first that does not fit.
int check_models(const Config& config, const std::optional<std::string>& device) {
  const std::vector<ModelPlan> plans = plan_box(config);
  if (device) {  // each model's plan on that device, with its share of it
    bool all_fit = true;
    for (const ModelPlan& p : plans) {
      bool fits = false;
      const std::string report = device_plan_report(p.config, p.stage, parse_device(*device), fits);
      std::printf("model '%s' (role %s)\n%s%s%s\n", p.name.c_str(), p.config.model.role.c_str(),
                  describe_spec(p.stage.info).c_str(), report.c_str(), fits ? "ok" : "does not fit");
      all_fit = all_fit && fits;
    }
    return all_fit ? 0 : 2;
  }
  std::string out;
  for (const ModelPlan& p : plans) out += "model '" + p.name + "' (role " + p.config.model.role + ")\n" + describe_spec(p.stage.info);
  std::printf("%s%s", out.c_str(), describe_box_plan(config, plans).c_str());
  std::fflush(stdout);
  require_box_fits(plans);
  std::printf("ok\n");
  return 0;
}

}  // namespace

int run_check(const Args& args) {
  Flags flags(args);
  flags.expect_only({"config", "set", "model", "device"});
  if (!flags.positional().empty()) throw InputError("unexpected argument '" + flags.positional()[0] + "'");
  auto config_path = flags.get("config");
  auto model_path = flags.get("model");
  if (config_path.has_value() == model_path.has_value())
    throw InputError(
        "usage: sparkd check --config spark.toml | --model PATH  [--set section.key=value ...] [--device NAME]");
  Config config = config_path ? load_config(*config_path, flags.get_all("set")) : config_for_model(*model_path);
  if (model_path && flags.has("set")) {
    // --model PATH with overrides: the defaults, the path, then each --set, validated alike.
    std::vector<std::string> sets = {"model.path=" + toml_string(*model_path)};
    for (const auto& s : flags.get_all("set")) sets.push_back(s);
    config = parse_config("", "--model", sets);
  }

  if (config.models.size() > 1) return check_models(config, flags.get("device"));
  config = model_run_config(config, 0);  // a lone [[models]] entry's memory_share applies too
  const StagePlan stage = plan_stage(config);
  const LayerRange range = stage.range;
  if (auto device = flags.get("device")) {  // a plan for another machine's GPU: this one's memory does not matter
    bool fits = false;
    const std::string report = device_plan_report(config, stage, parse_device(*device), fits);
    std::printf("%s%s%s\n", describe_spec(stage.info).c_str(), report.c_str(), fits ? "ok" : "does not fit");
    return fits ? 0 : 2;
  }
  std::printf("%s%s", describe_spec(stage.info).c_str(), describe_plan(stage.memory).c_str());
  std::fflush(stdout);
  require_fits(stage.memory);
  if (config.peer.enabled) {
    std::printf("peer\n  this box         %s, layers [%lld, %lld)\n  pair             %s\n", config.peer.role.c_str(),
                static_cast<long long>(range.first_layer), static_cast<long long>(range.last_layer),
                probe_peer(config.peer).c_str());
    std::fflush(stdout);
  }
  std::printf("ok\n");
  return 0;
}

}  // namespace spark
