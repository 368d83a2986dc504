// layer_shape.cpp — the per-layer description from the ModelSpec, and the check of it
// against what a backend implements.
#include "engine/model/layer_shape.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/model/arch.h"
#include "engine/util/check.h"

namespace spark {

const char* name_of(NormPlacement p) {
  return p == NormPlacement::PRE ? "pre" : p == NormPlacement::SANDWICH ? "sandwich" : "post";
}
const char* name_of(NormKind k) {
  return k == NormKind::RMS ? "rms" : k == NormKind::RMS_PLUS_ONE ? "rms (1 + w)" : "layer norm";
}
const char* name_of(Activation a) {
  return a == Activation::SILU ? "silu" : a == Activation::CLAMPED_SWIGLU ? "clamped swiglu"
                                        : a == Activation::GELU_TANH      ? "gelu (tanh)"
                                        : a == Activation::RELU2          ? "relu^2"
                                                                           : "gelu";
}
const char* name_of(Mixer m) {
  return m == Mixer::ATTENTION ? "attention" : m == Mixer::RECURRENT ? "gated deltanet" : m == Mixer::MAMBA2 ? "mamba-2" : "none";
}

std::vector<LayerShape> layer_shapes(const ModelSpec& s, LayerRange range) {
  check_range(s, range);
  std::vector<LayerShape> out;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) {
    LayerShape x;
    x.layer = l;
    x.mixer = !s.layer_has_mixer(l)       ? Mixer::NONE
              : !s.layer_is_recurrent(l) ? Mixer::ATTENTION
              : s.mamba2_layers()        ? Mixer::MAMBA2
                                         : Mixer::RECURRENT;
    x.norm_kind = s.norm_plus_one ? NormKind::RMS_PLUS_ONE : NormKind::RMS;
    x.norm_eps = s.rms_norm_eps;
    x.num_heads = s.num_heads;
    x.num_kv_heads = s.layer_num_kv_heads(l);
    x.head_dim = s.layer_head_dim(l);
    x.attention_scale =
        1.0 / std::sqrt(s.query_pre_attn_scalar > 0 ? s.query_pre_attn_scalar : static_cast<double>(x.head_dim));
    if (s.sandwich_norms) x.norm_placement = NormPlacement::SANDWICH;
    if (s.gelu_tanh_mlp) x.activation = Activation::GELU_TANH;
    if (s.encoder) {
      x.norm_placement = NormPlacement::POST;
      x.norm_kind = NormKind::LAYER;
      x.activation = Activation::GELU;
      x.bidirectional = true;
    }
    x.qk_norm = s.qk_norm;
    x.sinks = s.attention_sinks;
    x.reads_model_kv = s.is_assistant() && x.mixer == Mixer::ATTENTION;
    x.window = !s.layer_is_sliding(l) ? 0 : x.reads_model_kv ? s.sliding_window - 1 : s.sliding_window;
    const bool own_rope = s.sliding_rope && x.window > 0;
    x.rope_theta = own_rope ? s.sliding_rope_theta : s.rope_theta;
    x.rope_scaling = own_rope ? s.sliding_rope_scaling : s.rope_scaling;
    x.rotary_dim = s.rotary_dim > 0 ? s.rotary_dim : x.head_dim;
    x.rope = !s.no_rope && !s.encoder;  // an encoder's positions are learned, added to its input
    x.output_gate = s.attn_output_gate && x.mixer == Mixer::ATTENTION;
    x.v_norm = s.v_norm && x.mixer == Mixer::ATTENTION;
    x.k_eq_v = x.mixer == Mixer::ATTENTION && !s.is_assistant() && !s.layer_has_v_proj(l);
    x.layer_scalar = s.layer_scalar;
    x.ffn = s.layer_has_ffn(l);
    x.moe = s.layer_is_moe(l);
    x.moe_beside_mlp = x.moe && s.moe_beside_mlp;
    x.shared_expert = x.moe && s.shared_expert_intermediate_size > 0;
    x.sigmoid_router = x.moe && s.sigmoid_router;
    if (s.relu2_mlp) x.activation = Activation::RELU2;
    if (s.gptoss_moe) {
      x.activation = Activation::CLAMPED_SWIGLU;
      x.swiglu_limit = static_cast<float>(s.swiglu_limit);
      x.swiglu_alpha = static_cast<float>(s.swiglu_alpha);
      x.softmax_after_topk = true;
    }
    out.push_back(x);
  }
  return out;
}

KvTokenSize kv_token_size(const ModelSpec& s, LayerRange range, bool sliding_only) {
  KvTokenSize n;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) {
    if (!s.layer_has_mixer(l) || s.layer_is_recurrent(l) || s.is_assistant() || (sliding_only && !s.layer_is_sliding(l)))
      continue;
    n.values += 2 * uint64_t(s.layer_num_kv_heads(l) * s.layer_head_dim(l));
    n.heads += 2 * uint64_t(s.layer_num_kv_heads(l));
  }
  return n;
}

uint64_t recurrent_state_bytes(const ModelSpec& s, LayerRange range) {
  int64_t recurrent = 0;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) recurrent += s.layer_has_mixer(l) && s.layer_is_recurrent(l);
  return uint64_t(recurrent) * uint64_t(s.recurrent_state_values()) * sizeof(float);
}

namespace {

template <typename T>
void require_one_of(const std::vector<T>& have, T want, const LayerCases& c, const LayerShape& l, const char* what) {
  if (std::find(have.begin(), have.end(), want) == have.end())
    throw InputError(c.backend + " has no case for layer " + std::to_string(l.layer) + "'s " + what + " '" +
                     name_of(want) + "'");
}

// "10000, no scaling" / "1e+06, linear scaling".
std::string rope_text(double theta, const RopeScaling& scaling) {
  char base[32];
  std::snprintf(base, sizeof base, "%g", theta);
  return std::string(base) + ", " + (scaling.type.empty() ? "no" : scaling.type) + " scaling";
}

[[noreturn]] void lacks(const LayerCases& c, const LayerShape& l, const std::string& what) {
  throw InputError(c.backend + " has no case for layer " + std::to_string(l.layer) + "'s " + what);
}

}  // namespace

void require_cases(const std::vector<LayerShape>& layers, const ModelSpec& s, const LayerCases& c) {
  for (const LayerShape& l : layers) {
    require_one_of(c.mixers, l.mixer, c, l, "token mixer");
    require_one_of(c.norm_placements, l.norm_placement, c, l, "norm placement");
    require_one_of(c.norm_kinds, l.norm_kind, c, l, "norm kind");
    require_one_of(c.activations, l.activation, c, l, "activation");
    if (!c.per_layer_geometry && (l.num_heads != s.num_heads || l.num_kv_heads != s.num_kv_heads ||
                                  l.head_dim != s.head_dim))
      lacks(c, l, "own attention geometry (the model's: " + std::to_string(s.num_heads) + " heads, " +
                      std::to_string(s.num_kv_heads) + " kv heads, head_dim " + std::to_string(s.head_dim) + ")");
    if (!c.per_layer_rope && l.rope && (l.rope_theta != s.rope_theta || !(l.rope_scaling == s.rope_scaling)))
      lacks(c, l, "own RoPE (base " + rope_text(l.rope_theta, l.rope_scaling) + "; the model's: base " +
                      rope_text(s.rope_theta, s.rope_scaling) + ")");
    if (!c.partial_rotary && l.rotary_dim != l.head_dim)
      lacks(c, l, "partial rotary embedding (" + std::to_string(l.rotary_dim) + " of " +
                      std::to_string(l.head_dim) + " dimensions)");
    if (!c.custom_attention_scale && std::fabs(l.attention_scale * std::sqrt(double(l.head_dim)) - 1.0) > 1e-12)
      lacks(c, l, "attention scale other than 1/sqrt(head_dim)");
    if (!c.output_gate && l.output_gate) lacks(c, l, "attention output gate");
    if (!c.shared_expert && l.shared_expert) lacks(c, l, "shared expert");
    if (!c.no_rope && !l.rope && l.attends()) lacks(c, l, "attention without RoPE");
    if (!c.ffn_less_layers && !l.ffn) lacks(c, l, "missing feed-forward (a token-mixer-only block)");
    if (!c.sigmoid_router && l.sigmoid_router) lacks(c, l, "sigmoid router with score-correction bias");
    if (!c.bidirectional && l.bidirectional) lacks(c, l, "bidirectional attention (an encoder's)");
    if (!c.v_norm && l.v_norm) lacks(c, l, "value norm (an RMSNorm without a weight)");
    if (!c.k_eq_v && l.k_eq_v) lacks(c, l, "values taken from the key projection (attention_k_eq_v)");
    if (!c.layer_scalar && l.layer_scalar) lacks(c, l, "output scalar");
    if (!c.moe_beside_mlp && l.moe_beside_mlp) lacks(c, l, "dense MLP beside its experts (Gemma 4's MoE block)");
    if (!c.reads_model_kv && l.reads_model_kv) lacks(c, l, "attention over the model's K and V (Gemma 4's assistant)");
  }
  if (!c.embedding_scale && s.scale_embedding)
    throw InputError(c.backend + " has no case for the model's embedding scaled by sqrt(hidden_size)");
  if (!c.logit_softcap && s.final_logit_softcap > 0)
    throw InputError(c.backend + " has no case for the model's final logit softcapping");
}

}  // namespace spark
