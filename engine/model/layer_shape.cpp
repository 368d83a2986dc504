// layer_shape.cpp — the per-layer description from the ModelSpec, and the check of it
// against what a backend implements.
#include "engine/model/layer_shape.h"

#include <algorithm>
#include <cmath>

#include "engine/model/arch.h"
#include "engine/util/check.h"

namespace spark {

const char* name_of(NormPlacement p) { return p == NormPlacement::PRE ? "pre" : "sandwich"; }
const char* name_of(NormKind k) { return k == NormKind::RMS ? "rms" : "rms (1 + w)"; }
const char* name_of(Activation a) {
  return a == Activation::SILU ? "silu" : a == Activation::CLAMPED_SWIGLU ? "clamped swiglu" : "gelu (tanh)";
}
const char* name_of(Mixer m) { return m == Mixer::ATTENTION ? "attention" : "recurrent state"; }

std::vector<LayerShape> layer_shapes(const ModelSpec& s, LayerRange range) {
  check_range(s, range);
  std::vector<LayerShape> out;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) {
    LayerShape x;
    x.layer = l;
    x.norm_eps = s.rms_norm_eps;
    x.num_heads = s.num_heads;
    x.num_kv_heads = s.num_kv_heads;
    x.head_dim = s.head_dim;
    x.attention_scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    x.qk_norm = s.qk_norm;
    x.sinks = s.attention_sinks;
    x.window = s.layer_is_sliding(l) ? s.sliding_window : 0;
    x.rope_theta = s.rope_theta;
    x.rotary_dim = s.head_dim;
    x.moe = s.layer_is_moe(l);
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

namespace {

template <typename T>
void require_one_of(const std::vector<T>& have, T want, const LayerCases& c, const LayerShape& l, const char* what) {
  if (std::find(have.begin(), have.end(), want) == have.end())
    throw InputError(c.backend + " has no case for layer " + std::to_string(l.layer) + "'s " + what + " '" +
                     name_of(want) + "'");
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
                                  l.head_dim != s.head_dim || l.rope_theta != s.rope_theta))
      lacks(c, l, "own attention geometry or RoPE base (the model's: " + std::to_string(s.num_heads) + " heads, " +
                      std::to_string(s.num_kv_heads) + " kv heads, head_dim " + std::to_string(s.head_dim) + ")");
    if (!c.partial_rotary && l.rotary_dim != l.head_dim)
      lacks(c, l, "partial rotary embedding (" + std::to_string(l.rotary_dim) + " of " +
                      std::to_string(l.head_dim) + " dimensions)");
    if (!c.custom_attention_scale && std::fabs(l.attention_scale * std::sqrt(double(l.head_dim)) - 1.0) > 1e-12)
      lacks(c, l, "attention scale other than 1/sqrt(head_dim)");
  }
}

}  // namespace spark
