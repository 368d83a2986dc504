// gated_delta_net_keys.cpp — the config keys of the Gated DeltaNet hybrids.
#include "engine/model/arch/gated_delta_net_keys.h"

#include "engine/model/arch/shared_keys.h"

namespace spark {
namespace {

// "partial_rotary_factor", in rope_parameters (transformers 5) or beside it; the
// architecture's default is a quarter of each head.
void read_partial_rotary(const ConfigReader& r, ModelSpec& s) {
  double factor = r.number_or("partial_rotary_factor", 0.25);
  if (r.has("rope_parameters") && r.j["rope_parameters"].is_object())
    factor = ConfigReader{r.j["rope_parameters"], r.source}.number_or("partial_rotary_factor", factor);
  const auto dim = static_cast<int64_t>(static_cast<double>(s.head_dim) * factor);
  if (!(factor > 0 && factor <= 1) || dim < 2 || dim % 2 != 0)
    r.fail("partial_rotary_factor", "= " + std::to_string(factor) + " must give an even number of rotary dimensions of head_dim " +
                                        std::to_string(s.head_dim));
  s.rotary_dim = dim;
}

// layer_types ("linear_attention" / "full_attention" per layer), or every
// full_attention_interval-th layer attending.
void read_hybrid_layer_types(const ConfigReader& r, ModelSpec& s) {
  s.layer_recurrent.assign(static_cast<size_t>(s.num_layers), 0);
  if (!r.has("layer_types")) {
    const int64_t every = r.integer_or("full_attention_interval", 1, MAX_LAYERS, 4);
    for (int64_t l = 0; l < s.num_layers; ++l) s.layer_recurrent[size_t(l)] = (l + 1) % every != 0;
    return;
  }
  const nlohmann::json& types = r.j["layer_types"];
  if (!types.is_array() || int64_t(types.size()) != s.num_layers)
    r.fail("layer_types", "must list one type per layer (" + std::to_string(s.num_layers) + ")");
  for (size_t l = 0; l < types.size(); ++l) {
    const std::string t = types[l].is_string() ? types[l].get<std::string>() : types[l].dump();
    if (t != "linear_attention" && t != "full_attention")
      r.fail("layer_types", "[" + std::to_string(l) + "] is \"" + t + "\", not \"linear_attention\" or \"full_attention\"");
    s.layer_recurrent[l] = t == "linear_attention";
  }
}

// What is wrong with the DeltaNet sizes ("" when nothing is), said of the value-head key;
// `key_heads` is the file's name for the key-head count.
std::string delta_net_size_problem(const ModelSpec::DeltaNet& d, const std::string& key_heads) {
  if (d.num_v_heads % d.num_k_heads != 0)
    return "= " + std::to_string(d.num_v_heads) + " must be a multiple of " + key_heads + " = " + std::to_string(d.num_k_heads);
  if (d.conv_dim() > MAX_DIM || d.num_v_heads * d.k_head_dim * d.v_head_dim > (int64_t(1) << 28))
    return "with the head sizes gives an implausibly large state";
  return "";
}

void read_delta_net_sizes(const ConfigReader& r, ModelSpec& s) {
  ModelSpec::DeltaNet& d = s.delta_net;
  d.num_k_heads = r.integer_or("linear_num_key_heads", 1, MAX_DIM, 16);
  d.num_v_heads = r.integer_or("linear_num_value_heads", 1, MAX_DIM, 32);
  d.k_head_dim = r.integer_or("linear_key_head_dim", 1, 1024, 128);
  d.v_head_dim = r.integer_or("linear_value_head_dim", 1, 1024, 128);
  d.conv_kernel = r.integer_or("linear_conv_kernel_dim", 2, 64, 4);
  if (const std::string problem = delta_net_size_problem(d, "linear_num_key_heads"); !problem.empty())
    r.fail("linear_num_value_heads", problem);
}

}  // namespace

void read_gated_delta_net_hybrid(const ConfigReader& r, ModelSpec& s) {
  s.qk_norm = true;
  s.attn_output_gate = true;
  s.norm_plus_one = true;
  refuse_attention_and_mlp_bias(r, s);
  if (r.has("hidden_act") && !(r.j["hidden_act"].is_string() && r.j["hidden_act"].get<std::string>() == "silu"))
    r.fail("hidden_act", "must be \"silu\"");
  read_partial_rotary(r, s);
  read_hybrid_layer_types(r, s);
  read_delta_net_sizes(r, s);
}

void read_gated_delta_net_hybrid(const GgufMetaReader& m, ModelSpec& s) {
  s.qk_norm = true;
  s.attn_output_gate = true;
  s.norm_plus_one = true;
  s.num_layers -= m.integer("nextn_predict_layers", 0, s.num_layers - 1, 0);
  const int64_t every = m.integer("full_attention_interval", 1, MAX_LAYERS);
  s.layer_recurrent.assign(static_cast<size_t>(s.num_layers), 0);
  for (int64_t l = 0; l < s.num_layers; ++l) s.layer_recurrent[size_t(l)] = (l + 1) % every != 0;
  ModelSpec::DeltaNet& d = s.delta_net;
  d.num_k_heads = m.integer("ssm.group_count", 1, MAX_DIM);
  d.num_v_heads = m.integer("ssm.time_step_rank", 1, MAX_DIM);
  d.k_head_dim = m.integer("ssm.state_size", 1, 1024);
  const int64_t inner = m.integer("ssm.inner_size", 1, MAX_DIM);
  if (inner % d.num_v_heads != 0) m.fail(m.arch + ".ssm.inner_size", "is not a multiple of ssm.time_step_rank");
  d.v_head_dim = inner / d.num_v_heads;
  if (d.v_head_dim > 1024) m.fail(m.arch + ".ssm.inner_size", "gives value heads wider than 1024");
  d.conv_kernel = m.integer("ssm.conv_kernel", 2, 64);
  d.value_heads_tiled = true;
  if (const std::string problem = delta_net_size_problem(d, m.arch + ".ssm.group_count"); !problem.empty())
    m.fail(m.arch + ".ssm.time_step_rank", problem);
}

}  // namespace spark
