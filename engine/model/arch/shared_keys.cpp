// shared_keys.cpp — config keys several architectures read the same way.
#include "engine/model/arch/shared_keys.h"

#include <algorithm>

namespace spark {

void refuse_attention_and_mlp_bias(const ConfigReader& r, const ModelSpec& s) {
  if (r.boolean_or("attention_bias", false)) r.fail("attention_bias", "= true is not supported for " + s.architecture);
  if (r.boolean_or("mlp_bias", false)) r.fail("mlp_bias", "= true is not supported");
}

void cap_context_at_sliding_window(const ConfigReader& r, ModelSpec& s, bool on_by_default) {
  if (r.has("sliding_window") && r.boolean_or("use_sliding_window", on_by_default)) {
    int64_t w = r.integer("sliding_window", 1, MAX_POSITIONS);
    s.max_position_embeddings = std::min(s.max_position_embeddings, w);
  }
}

void read_dense_mlp(const ConfigReader& r, ModelSpec& s) { s.intermediate_size = r.integer("intermediate_size", 1, MAX_DIM); }

void read_dense_mlp(const GgufMetaReader& m, ModelSpec& s) {
  s.intermediate_size = m.integer("feed_forward_length", 1, MAX_DIM);
}

void read_qwen_routed_experts(const ConfigReader& r, ModelSpec& s, bool norm_topk_prob_default) {
  // Transformers 5 writes "num_local_experts"; published configs say "num_experts".
  s.num_experts = r.has("num_experts") ? r.integer("num_experts", 1, MAX_EXPERTS)
                                       : r.integer("num_local_experts", 1, MAX_EXPERTS);
  s.num_experts_per_tok = r.integer("num_experts_per_tok", 1, s.num_experts);
  s.moe_intermediate_size = r.integer("moe_intermediate_size", 1, MAX_DIM);
  s.norm_topk_prob = r.boolean_or("norm_topk_prob", norm_topk_prob_default);
  s.decoder_sparse_step = r.integer_or("decoder_sparse_step", 1, MAX_LAYERS, 1);
  if (r.has("mlp_only_layers")) {
    const nlohmann::json& layers = r.j["mlp_only_layers"];
    if (!layers.is_array()) r.fail("mlp_only_layers", "must be a list of layer indices");
    for (const nlohmann::json& x : layers) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= s.num_layers)
        r.fail("mlp_only_layers", "holds " + x.dump() + ", not a layer index");
      s.mlp_only_layers.push_back(x.get<int64_t>());
    }
  }
  bool any_dense = false;
  for (int64_t l = 0; l < s.num_layers; ++l) any_dense = any_dense || !s.layer_is_moe(l);
  s.intermediate_size = any_dense ? r.integer("intermediate_size", 1, MAX_DIM)
                                  : r.integer_or("intermediate_size", 1, MAX_DIM, 0);
}

void read_layer_types(const ConfigReader& r, ModelSpec& s, const std::vector<uint8_t>& default_sliding) {
  s.layer_sliding.assign(static_cast<size_t>(s.num_layers), 0);
  if (r.has("layer_types")) {
    const nlohmann::json& types = r.j["layer_types"];
    if (!types.is_array() || static_cast<int64_t>(types.size()) != s.num_layers)
      r.fail("layer_types", "must list one type per layer (" + std::to_string(s.num_layers) + ")");
    for (size_t l = 0; l < types.size(); ++l) {
      const std::string t = types[l].is_string() ? types[l].get<std::string>() : types[l].dump();
      if (t != "sliding_attention" && t != "full_attention")
        r.fail("layer_types", "[" + std::to_string(l) + "] = \"" + t +
                                  "\" is not one of sliding_attention, full_attention");
      s.layer_sliding[l] = t == "sliding_attention";
    }
  } else {
    SPARK_CHECK(default_sliding.size() == s.layer_sliding.size(), "read_layer_types: a default for every layer");
    s.layer_sliding = default_sliding;
  }
  bool any_sliding = false;
  for (uint8_t x : s.layer_sliding) any_sliding = any_sliding || x;
  if (any_sliding) {
    if (!r.has("sliding_window")) r.fail("sliding_window", "is missing but layer_types has sliding_attention layers");
    if (!r.j["sliding_window"].is_number_integer() || r.j["sliding_window"].get<int64_t>() < 1)
      r.fail("sliding_window", "= " + r.j["sliding_window"].dump() + " must be a positive number of tokens");
    s.sliding_window = r.integer("sliding_window", 1, MAX_POSITIONS);
  }
}

bool read_rope_by_layer_type(const ConfigReader& r, ModelSpec& s) {
  if (!r.has("rope_parameters") || !r.j["rope_parameters"].is_object()) return false;
  const nlohmann::json& by_type = r.j["rope_parameters"];
  if (!by_type.contains("full_attention") && !by_type.contains("sliding_attention")) return false;
  for (const char* type : {"full_attention", "sliding_attention"}) {
    if (!by_type.contains(type) || by_type[type].is_null()) continue;
    const std::string key = std::string("rope_parameters.") + type;
    if (!by_type[type].is_object()) r.fail(key, "must be an object");
    const std::string source = r.source + " (" + key + ")";
    const ConfigReader p{by_type[type], source};
    const bool full = type[0] == 'f';
    double& theta = full ? s.rope_theta : s.sliding_rope_theta;
    theta = p.number_or("rope_theta", theta);
    if (!(theta > 0)) p.fail("rope_theta", "must be positive");
    read_rope_scaling(p, s.max_position_embeddings, full ? s.rope_scaling : s.sliding_rope_scaling);
  }
  s.sliding_rope = true;
  return true;
}

std::vector<int64_t> gguf_per_layer(const GgufMetaReader& m, const std::string& key, int64_t blocks, int64_t hi) {
  const std::string k = m.arch + "." + key;
  const GgufValue* v = m.f.find(k);
  if (!v) m.fail(k, "is missing");
  if (v->type != GgufType::ARRAY) return std::vector<int64_t>(size_t(blocks), m.integer(key, 0, hi));
  if (v->elem_type == GgufType::UINT64) m.fail(k, "must be an array of 32-bit integers");
  const bool integers = v->elem_type != GgufType::BOOL && v->elem_type != GgufType::STRING &&
                        v->elem_type != GgufType::ARRAY && v->elem_type != GgufType::FLOAT32 &&
                        v->elem_type != GgufType::FLOAT64;
  if (!integers) m.fail(k, "must be an array of integers, one a layer");
  if (int64_t(v->ints.size()) != blocks)
    m.fail(k, "has " + std::to_string(v->ints.size()) + " entries, but block_count is " + std::to_string(blocks) +
                  " (one a layer)");
  for (size_t l = 0; l < v->ints.size(); ++l)
    if (v->ints[l] < 0 || v->ints[l] > hi)
      m.fail(k, "[" + std::to_string(l) + "] = " + std::to_string(v->ints[l]) + " is outside [0, " +
                    std::to_string(hi) + "]");
  return v->ints;
}

}  // namespace spark
