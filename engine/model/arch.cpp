// arch.cpp — the tensors of every architecture (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, gpt-oss,
// Qwen3.5/3.6, Gemma 3): parts, shapes, and their Hugging Face and GGUF names.
#include "engine/model/arch.h"

#include <iterator>
#include <utility>

#include "engine/util/check.h"

namespace spark {

namespace {

struct PartNames {
  const char* hf;    // after "model.layers.N." for a layer part; "{E}" is the expert index
  const char* gguf;  // llama.cpp's, after "blk.N." for a layer part; stacked over experts
  const char* kind;  // "weight" or "bias"; "" for a Hugging Face name without one (the GGUF's is "weight")
};

// Indexed by Part.
constexpr PartNames kNames[kNumParts] = {
    {"model.embed_tokens", "token_embd", "weight"},
    {"model.norm", "output_norm", "weight"},
    {"lm_head", "output", "weight"},
    {"mtp.fc", "nextn.eh_proj", "weight"},
    {"mtp.pre_fc_norm_embedding", "nextn.enorm", "weight"},
    {"mtp.pre_fc_norm_hidden", "nextn.hnorm", "weight"},
    {"model.embed_positions", "position_embd", "weight"},
    {"model.embed_token_types", "token_types", "weight"},
    {"model.embed_norm", "token_embd_norm", "weight"},
    {"model.embed_norm", "token_embd_norm", "bias"},
    // Gemma 4's assistant: read from its own checkpoint only (no GGUF names).
    {"pre_projection", "", "weight"},
    {"post_projection", "", "weight"},
    {"masked_embedding.centroids", "", "weight"},
    {"masked_embedding.token_ordering", "", ""},
    {"input_layernorm", "attn_norm", "weight"},
    {"self_attn.q_proj", "attn_q", "weight"},
    {"self_attn.k_proj", "attn_k", "weight"},
    {"self_attn.v_proj", "attn_v", "weight"},
    {"self_attn.o_proj", "attn_output", "weight"},
    {"self_attn.q_proj", "attn_q", "bias"},
    {"self_attn.k_proj", "attn_k", "bias"},
    {"self_attn.v_proj", "attn_v", "bias"},
    {"self_attn.q_norm", "attn_q_norm", "weight"},
    {"self_attn.k_norm", "attn_k_norm", "weight"},
    {"post_attention_layernorm", "ffn_norm", "weight"},
    {"mlp.gate_proj", "ffn_gate", "weight"},
    {"mlp.up_proj", "ffn_up", "weight"},
    {"mlp.down_proj", "ffn_down", "weight"},
    {"mlp.gate", "ffn_gate_inp", "weight"},
    {"mlp.experts.{E}.gate_proj", "ffn_gate_exps", "weight"},
    {"mlp.experts.{E}.up_proj", "ffn_up_exps", "weight"},
    {"mlp.experts.{E}.down_proj", "ffn_down_exps", "weight"},
    {"self_attn.o_proj", "attn_output", "bias"},
    {"self_attn.sinks", "attn_sinks", ""},
    {"mlp.gate", "ffn_gate_inp", "bias"},
    {"mlp.experts.{E}.gate_proj", "ffn_gate_exps", "bias"},
    {"mlp.experts.{E}.up_proj", "ffn_up_exps", "bias"},
    {"mlp.experts.{E}.down_proj", "ffn_down_exps", "bias"},
    {"linear_attn.in_proj_qkv", "attn_qkv", "weight"},
    {"linear_attn.in_proj_z", "attn_gate", "weight"},
    {"linear_attn.in_proj_b", "ssm_beta", "weight"},
    {"linear_attn.in_proj_a", "ssm_alpha", "weight"},
    {"linear_attn.conv1d", "ssm_conv1d", "weight"},
    {"linear_attn.A_log", "ssm_a", ""},
    {"linear_attn.dt_bias", "ssm_dt", ""},
    {"linear_attn.norm", "ssm_norm", "weight"},
    {"linear_attn.out_proj", "ssm_out", "weight"},
    {"mlp.shared_expert.gate_proj", "ffn_gate_shexp", "weight"},
    {"mlp.shared_expert.up_proj", "ffn_up_shexp", "weight"},
    {"mlp.shared_expert.down_proj", "ffn_down_shexp", "weight"},
    {"mlp.shared_expert_gate", "ffn_gate_inp_shexp", "weight"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b", ""},
    {"mlp.fc1_latent_proj", "ffn_latent_in", "weight"},
    {"mlp.fc2_latent_proj", "ffn_latent_out", "weight"},
    // llama.cpp names Mamba-2's parts as the DeltaNet's above (which a GGUF lookup finds first).
    {"mixer.in_proj", "ssm_in", "weight"},
    {"mixer.conv1d", "ssm_conv1d", "weight"},
    {"mixer.conv1d", "ssm_conv1d", "bias"},
    {"mixer.A_log", "ssm_a", ""},
    {"mixer.D", "ssm_d", ""},
    {"mixer.dt_bias", "ssm_dt", ""},
    {"mixer.norm", "ssm_norm", "weight"},
    {"mixer.out_proj", "ssm_out", "weight"},
    {"input_layernorm", "attn_norm", "bias"},
    {"post_attention_layernorm", "ffn_norm", "bias"},
    {"mlp.up_proj", "ffn_up", "bias"},
    {"mlp.down_proj", "ffn_down", "bias"},
    // The sandwich norms. Gemma's checkpoints call the first post_attention_layernorm, which
    // is Llama's (and this table's) name of FFN_NORM: arch/gemma3.cpp renames it to this one.
    {"post_attention_norm", "post_attention_norm", "weight"},
    {"post_feedforward_layernorm", "post_ffw_norm", "weight"},
    // Gemma 4's: its checkpoints' names, llama.cpp's in its gemma4 files.
    {"layer_scalar", "layer_output_scale", ""},
    {"pre_feedforward_layernorm_2", "pre_ffw_norm_2", "weight"},
    {"post_feedforward_layernorm_1", "post_ffw_norm_1", "weight"},
    {"post_feedforward_layernorm_2", "post_ffw_norm_2", "weight"},
    {"router.scale", "ffn_gate_inp_scale", ""},
    {"router.per_expert_scale", "ffn_down_exps_scale", ""},
};
static_assert(std::size(kNames) == kNumParts);
constexpr size_t kFirstLayerPart = static_cast<size_t>(Part::ATTN_NORM);

const PartNames& names_of(Part p) { return kNames[static_cast<size_t>(p)]; }

std::string fill_expert(std::string pattern, const std::string& expert) {
  size_t at = pattern.find("{E}");
  if (at != std::string::npos) pattern.replace(at, 3, expert);
  return pattern;
}

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// What every part of `range` adds up to: tensors and parameters.
struct Counts {
  int64_t params = 0;
  int64_t tensors = 0;
  void add(const std::vector<PartSpec>& parts) {
    for (const PartSpec& p : parts) {
      tensors += p.copies;
      params += p.copies * product(p.shape);
    }
  }
};

Counts count(const ModelSpec& s, LayerRange range) {
  Counts c;
  c.add(outer_parts(s, range));
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) c.add(layer_parts(s, l));
  return c;
}

}  // namespace

bool part_is_norm(Part p) {
  return p == Part::FINAL_NORM || p == Part::ATTN_NORM || p == Part::FFN_NORM || p == Part::Q_NORM ||
         p == Part::K_NORM || p == Part::LIN_NORM || p == Part::MTP_EMBED_NORM || p == Part::MTP_HIDDEN_NORM ||
         p == Part::SSM_NORM || p == Part::EMBED_NORM || p == Part::POST_ATTN_NORM || p == Part::POST_FFN_NORM ||
         p == Part::LAYER_SCALAR || p == Part::MOE_NORM || p == Part::POST_MLP_NORM || p == Part::POST_MOE_NORM ||
         p == Part::ROUTER_INPUT_SCALE || p == Part::EXPERT_SCALE;
}

const std::vector<PartFamily>& part_families() {
  static const std::vector<PartFamily> families = {
      {"attention", {Part::Q, Part::K, Part::V, Part::O, Part::LIN_QKV, Part::LIN_Z, Part::LIN_B, Part::LIN_A, Part::LIN_OUT,
                     Part::SSM_IN, Part::SSM_OUT}},
      {"mlp", {Part::GATE, Part::UP, Part::DOWN}},
      {"experts", {Part::EXPERT_GATE, Part::EXPERT_UP, Part::EXPERT_DOWN, Part::SHARED_GATE, Part::SHARED_UP,
                   Part::SHARED_DOWN, Part::MOE_LATENT_IN, Part::MOE_LATENT_OUT}},
      {"lm_head", {Part::LM_HEAD}},
      {"embedding", {Part::EMBEDDING, Part::POS_EMBEDDING, Part::TYPE_EMBEDDING}},
  };
  return families;
}

bool part_is_per_expert(Part p) {
  return p == Part::EXPERT_GATE || p == Part::EXPERT_UP || p == Part::EXPERT_DOWN || p == Part::EXPERT_GATE_BIAS ||
         p == Part::EXPERT_UP_BIAS || p == Part::EXPERT_DOWN_BIAS;
}

namespace {

// A Gated DeltaNet token mixer's parts (Qwen3.5/3.6).
std::vector<PartSpec> delta_net_parts(const ModelSpec& s) {
  const ModelSpec::DeltaNet& d = s.delta_net;
  const int64_t h = s.hidden_size;
  return {
      {Part::ATTN_NORM, {h}},
      {Part::LIN_QKV, {d.conv_dim(), h}},
      {Part::LIN_Z, {d.value_dim(), h}},
      {Part::LIN_B, {d.num_v_heads, h}},
      {Part::LIN_A, {d.num_v_heads, h}},
      {Part::LIN_CONV, {d.conv_dim(), 1, d.conv_kernel}},
      {Part::LIN_A_LOG, {d.num_v_heads}},
      {Part::LIN_DT_BIAS, {d.num_v_heads}},
      {Part::LIN_NORM, {d.v_head_dim}},
      {Part::LIN_OUT, {h, d.value_dim()}},
  };
}

// A Mamba-2 token mixer's parts (Nemotron-H).
std::vector<PartSpec> mamba2_parts(const ModelSpec& s) {
  const ModelSpec::Mamba2& m = s.mamba2;
  const int64_t h = s.hidden_size;
  std::vector<PartSpec> out = {
      {Part::ATTN_NORM, {h}},
      {Part::SSM_IN, {m.in_proj_rows(), h}},
      {Part::SSM_CONV, {m.conv_dim(), 1, m.conv_kernel}},
      {Part::SSM_A_LOG, {m.num_heads}},
      {Part::SSM_D, {m.num_heads}},
      {Part::SSM_DT_BIAS, {m.num_heads}},
      {Part::SSM_NORM, {m.inner()}},
      {Part::SSM_OUT, {h, m.inner()}},
  };
  if (m.conv_bias) out.push_back({Part::SSM_CONV_BIAS, {m.conv_dim()}});
  return out;
}

// An encoder layer (ModelSpec::encoder): biased attention, its post-norm, a biased GELU MLP and
// its post-norm.
std::vector<PartSpec> encoder_layer_parts(const ModelSpec& s) {
  const int64_t h = s.hidden_size, q_dim = s.num_heads * s.head_dim, kv_dim = s.num_kv_heads * s.head_dim;
  const int64_t ff = s.intermediate_size;
  return {{Part::Q, {q_dim, h}},       {Part::Q_BIAS, {q_dim}},     {Part::K, {kv_dim, h}},
          {Part::K_BIAS, {kv_dim}},     {Part::V, {kv_dim, h}},      {Part::V_BIAS, {kv_dim}},
          {Part::O, {h, q_dim}},        {Part::O_BIAS, {h}},         {Part::ATTN_NORM, {h}},
          {Part::ATTN_NORM_BIAS, {h}},  {Part::UP, {ff, h}},         {Part::UP_BIAS, {ff}},
          {Part::DOWN, {h, ff}},        {Part::DOWN_BIAS, {h}},      {Part::FFN_NORM, {h}},
          {Part::FFN_NORM_BIAS, {h}}};
}

}  // namespace

std::vector<PartSpec> layer_parts(const ModelSpec& s, int64_t layer) {
  const int64_t h = s.hidden_size, hd = s.layer_head_dim(layer);
  const int64_t q_dim = s.num_heads * hd, kv_dim = s.layer_num_kv_heads(layer) * hd;
  if (s.encoder) return encoder_layer_parts(s);
  std::vector<PartSpec> out;
  if (!s.layer_has_mixer(layer)) {
    // A feed-forward block (Nemotron-H): its norm is FFN_NORM, below.
  } else if (s.layer_is_recurrent(layer)) {
    out = s.mamba2_layers() ? mamba2_parts(s) : delta_net_parts(s);
  } else {
    // An output gate doubles q_proj: per head, the query rows and then the gate rows.
    // An assistant's layers read the model's K and V: queries only.
    out = {{Part::ATTN_NORM, {h}}, {Part::Q, {q_dim * (s.attn_output_gate ? 2 : 1), h}}};
    if (!s.is_assistant()) out.push_back({Part::K, {kv_dim, h}});
    if (!s.is_assistant() && s.layer_has_v_proj(layer)) out.push_back({Part::V, {kv_dim, h}});
    out.push_back({Part::O, {h, q_dim}});
    if (s.attention_bias) {
      out.push_back({Part::Q_BIAS, {q_dim}});
      out.push_back({Part::K_BIAS, {kv_dim}});
      out.push_back({Part::V_BIAS, {kv_dim}});
    }
    if (s.o_bias) out.push_back({Part::O_BIAS, {h}});
    if (s.attention_sinks) out.push_back({Part::SINKS, {s.num_heads}});
    if (s.qk_norm) {
      out.push_back({Part::Q_NORM, {hd}});
      if (!s.is_assistant()) out.push_back({Part::K_NORM, {hd}});
    }
    if (s.sandwich_norms) out.push_back({Part::POST_ATTN_NORM, {h}});
  }
  if (s.layer_scalar) out.push_back({Part::LAYER_SCALAR, {1}});
  if (!s.layer_has_ffn(layer)) return out;  // a mixer block (Nemotron-H)
  out.push_back({Part::FFN_NORM, {h}});
  if (s.sandwich_norms) out.push_back({Part::POST_FFN_NORM, {h}});
  if (s.moe_beside_mlp && s.layer_is_moe(layer)) {  // Gemma 4: the dense MLP, then the experts beside it
    out.insert(out.end(), {{Part::GATE, {s.intermediate_size, h}}, {Part::UP, {s.intermediate_size, h}},
                           {Part::DOWN, {h, s.intermediate_size}}, {Part::MOE_NORM, {h}}, {Part::POST_MLP_NORM, {h}},
                           {Part::POST_MOE_NORM, {h}}, {Part::ROUTER_INPUT_SCALE, {h}},
                           {Part::EXPERT_SCALE, {s.num_experts}}});
  }
  // Squared-ReLU feed-forwards have no gate projection.
  const bool gated = !s.relu2_mlp;
  if (s.layer_is_moe(layer)) {
    // LatentMoE (Nemotron-3-Super): the routed experts work in a latent space of their own.
    const int64_t mi = s.moe_intermediate_size, experts = s.num_experts, in = s.moe_latent_size ? s.moe_latent_size : h;
    out.push_back({Part::ROUTER, {experts, h}});
    if (s.sigmoid_router) out.push_back({Part::ROUTER_SCORE_BIAS, {experts}});
    if (s.moe_latent_size) {
      out.push_back({Part::MOE_LATENT_IN, {in, h}});
      out.push_back({Part::MOE_LATENT_OUT, {h, in}});
    }
    if (gated) out.push_back({Part::EXPERT_GATE, {mi, in}, experts});
    out.push_back({Part::EXPERT_UP, {mi, in}, experts});
    out.push_back({Part::EXPERT_DOWN, {in, mi}, experts});
    if (s.gptoss_moe) {
      out.push_back({Part::ROUTER_BIAS, {experts}});
      out.push_back({Part::EXPERT_GATE_BIAS, {mi}, experts});
      out.push_back({Part::EXPERT_UP_BIAS, {mi}, experts});
      out.push_back({Part::EXPERT_DOWN_BIAS, {h}, experts});
    }
    if (const int64_t si = s.shared_expert_intermediate_size; si > 0) {
      if (gated) out.push_back({Part::SHARED_GATE, {si, h}});
      out.push_back({Part::SHARED_UP, {si, h}});
      out.push_back({Part::SHARED_DOWN, {h, si}});
      // Added as it is beside a sigmoid router; scaled by its own sigmoid gate otherwise.
      if (!s.sigmoid_router) out.push_back({Part::SHARED_EXPERT_GATE, {1, h}});
    }
  } else {
    const int64_t ff = s.intermediate_size;
    if (gated) out.push_back({Part::GATE, {ff, h}});
    out.push_back({Part::UP, {ff, h}});
    out.push_back({Part::DOWN, {h, ff}});
  }
  return out;
}

std::vector<PartSpec> outer_parts(const ModelSpec& s, LayerRange range) {
  const int64_t h = s.hidden_size;
  const bool last_stage = range.last_layer == s.num_layers;
  std::vector<PartSpec> out;
  if (range.first_layer == 0 || (last_stage && s.tie_word_embeddings)) out.push_back({Part::EMBEDDING, {s.vocab_size, h}});
  if (s.mtp_head && range.first_layer == 0)
    out.insert(out.end(), {{Part::MTP_FC, {h, 2 * h}}, {Part::MTP_EMBED_NORM, {h}}, {Part::MTP_HIDDEN_NORM, {h}}});
  if (s.is_assistant()) {
    out.insert(out.end(), {{Part::ASSIST_IN, {h, 2 * s.assistant_of_hidden}}, {Part::ASSIST_OUT, {s.assistant_of_hidden, h}}});
    if (s.num_centroids > 0)
      out.insert(out.end(), {{Part::CENTROIDS, {s.num_centroids, h}}, {Part::TOKEN_ORDERING, {s.vocab_size}}});
  }
  if (s.encoder && range.first_layer == 0) {
    out.push_back({Part::POS_EMBEDDING, {s.position_rows, h}});
    if (s.type_vocab_size > 0) out.push_back({Part::TYPE_EMBEDDING, {s.type_vocab_size, h}});
    out.insert(out.end(), {{Part::EMBED_NORM, {h}}, {Part::EMBED_NORM_BIAS, {h}}});
  }
  if (s.encoder) return out;  // no final norm; pooled, so no LM head either
  if (last_stage) {
    out.push_back({Part::FINAL_NORM, {h}});
    if (!s.tie_word_embeddings) out.push_back({Part::LM_HEAD, {s.vocab_size, h}});
  }
  return out;
}

std::string tensor_name(Part part, int64_t layer, int64_t expert) {
  const PartNames& n = names_of(part);
  std::string base = fill_expert(n.hf, std::to_string(expert)) + (*n.kind ? "." : "") + n.kind;
  if (static_cast<size_t>(part) < kFirstLayerPart) return base;
  return "model.layers." + std::to_string(layer) + "." + base;
}

void add_base_model_prefix(std::map<std::string, Tensor>& tensors) {
  const std::string prefix = "model.", embedding = tensor_name(Part::EMBEDDING);
  if (tensors.count(embedding) || !tensors.count(embedding.substr(prefix.size()))) return;
  std::map<std::string, Tensor> renamed;
  for (auto& [name, t] : tensors) {
    const bool outside = name.rfind("lm_head.", 0) == 0 || name.rfind("score.", 0) == 0;  // heads keep theirs
    t.name = outside ? name : prefix + name;
    renamed.emplace(t.name, t);
  }
  tensors = std::move(renamed);
}

std::string gguf_tensor_name(Part part, int64_t layer) {
  const PartNames& n = names_of(part);
  const std::string base = std::string(n.gguf) + "." + (*n.kind ? n.kind : "weight");
  if (static_cast<size_t>(part) < kFirstLayerPart) return base;
  return "blk." + std::to_string(layer) + "." + base;
}

LayerRange full_range(const ModelSpec& spec) { return LayerRange{0, spec.num_layers}; }

void check_range(const ModelSpec& spec, LayerRange r) {
  if (r.first_layer < 0 || r.first_layer >= r.last_layer || r.last_layer > spec.num_layers)
    throw InputError("layer range [" + std::to_string(r.first_layer) + ", " + std::to_string(r.last_layer) +
                     ") is not inside the model's " + std::to_string(spec.num_layers) + " layers");
}

std::vector<TensorSpec> expected_tensors(const ModelSpec& s, LayerRange range) {
  check_range(s, range);
  std::vector<TensorSpec> out;
  auto expand = [&](const std::vector<PartSpec>& parts, int64_t layer) {
    for (const PartSpec& p : parts) {
      if (!part_is_per_expert(p.part)) {
        out.push_back({tensor_name(p.part, layer), p.shape, p.part, layer, -1});
        continue;
      }
      for (int64_t e = 0; e < p.copies; ++e) out.push_back({tensor_name(p.part, layer, e), p.shape, p.part, layer, e});
    }
  };
  std::vector<PartSpec> outer = outer_parts(s, range);
  // The checkpoint's order: embedding, layers, final norm and head.
  if (!outer.empty() && outer.front().part == Part::EMBEDDING) expand({outer.front()}, -1);
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) expand(layer_parts(s, l), l);
  for (const PartSpec& p : outer)
    if (p.part != Part::EMBEDDING) expand({p}, -1);
  return out;
}

int64_t parameter_count(const ModelSpec& s) { return count(s, full_range(s)).params; }
int64_t parameter_count(const ModelSpec& s, LayerRange range) {
  check_range(s, range);
  return count(s, range).params;
}
int64_t expected_tensor_count(const ModelSpec& s, LayerRange range) {
  check_range(s, range);
  return count(s, range).tensors;
}

int64_t gguf_layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6 || name.find_first_not_of("0123456789", 4) != dot) return -1;
  if (dot - 4 > 1 && name[4] == '0') return -1;  // "blk.01." is no layer's name
  return std::stoll(name.substr(4, dot - 4));
}

std::optional<std::string> gguf_to_hf_name(const std::string& name,
                                           const std::vector<std::pair<const char*, const char*>>& aliases,
                                           const std::vector<std::pair<const char*, const char*>>& fused) {
  for (size_t i = 0; i < kFirstLayerPart; ++i)
    if (name == gguf_tensor_name(static_cast<Part>(i))) return tensor_name(static_cast<Part>(i));
  // A reranker's classifier, under the name Hugging Face's sequence classifiers give it.
  if (name == "cls.output.weight" || name == "cls.output.bias") return "score." + name.substr(11);
  // A cross-encoder's classifier has a dense layer (tanh) before it.
  if (name == "cls.weight" || name == "cls.bias") return "score.dense." + name.substr(4);
  if (gguf_layer_of(name) < 0) return std::nullopt;
  const size_t dot = name.find('.', 4);
  const std::string layer = name.substr(4, dot - 4);
  // A part the table gives no kind (A_log, dt_bias) may stand bare or with either suffix:
  // llama.cpp writes "ssm_a" and "ssm_dt.bias".
  std::string rest = name.substr(dot + 1);
  size_t last = rest.rfind('.');
  std::string base = last == std::string::npos ? rest : rest.substr(0, last);
  std::string kind = last == std::string::npos ? "" : rest.substr(last + 1);
  if (!kind.empty() && kind != "weight" && kind != "bias") return std::nullopt;
  for (const auto& [gguf, hf] : fused)
    if (base == gguf && !kind.empty()) return "model.layers." + layer + "." + hf + "." + kind;
  for (const auto& [alias, table_name] : aliases)
    if (base == alias) base = table_name;
  for (size_t i = kFirstLayerPart; i < kNumParts; ++i)
    if (base == kNames[i].gguf && (kind == kNames[i].kind || !*kNames[i].kind))
      return "model.layers." + layer + "." + kNames[i].hf + (*kNames[i].kind ? "." + kind : "");
  return std::nullopt;
}

std::string gguf_mtp_head_name(const std::string& name, int64_t head_block) {
  if (name == gguf_tensor_name(Part::EMBEDDING) || name == gguf_tensor_name(Part::LM_HEAD)) return name;
  if (gguf_layer_of(name) != head_block) return "";
  const std::string rest = name.substr(name.find('.', 4) + 1);
  if (rest == "nextn.shared_head_norm.weight") return gguf_tensor_name(Part::FINAL_NORM);
  return rest.starts_with("nextn.") ? rest : "blk.0." + rest;
}

bool gguf_is_stacked_experts(const std::string& name) {
  return name.find("_exps.") != std::string::npos && name.rfind("blk.", 0) == 0;
}

bool gguf_is_nvfp4_sidecar(const std::string& name) {
  const auto ends = [&](const std::string& tail) {
    return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends(".scale") || ends(".input_scale");
}

std::string gptoss_tensor_name(GptOssTensor t, int64_t layer) {
  static const char* const names[] = {"mlp.router.weight", "mlp.router.bias",
                                      "mlp.experts.gate_up_proj_blocks", "mlp.experts.gate_up_proj_scales",
                                      "mlp.experts.gate_up_proj_bias", "mlp.experts.down_proj_blocks",
                                      "mlp.experts.down_proj_scales", "mlp.experts.down_proj_bias",
                                      "mlp.experts.gate_up_proj", "mlp.experts.down_proj"};
  return "model.layers." + std::to_string(layer) + "." + names[static_cast<size_t>(t)];
}

std::string gguf_expert_name(const std::string& pattern, int64_t expert) {
  SPARK_CHECK(pattern.find("{E}") != std::string::npos, "not an expert pattern: " + pattern);
  return fill_expert(pattern, std::to_string(expert));
}

}  // namespace spark
