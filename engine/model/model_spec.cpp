// model_spec.cpp — Hugging Face config.json / generation_config.json to ModelSpec.
#include "engine/model/model_spec.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/model/architecture.h"
#include "engine/model/spec_readers.h"
#include "engine/util/check.h"

namespace spark {
namespace {

using nlohmann::json;

// Python's json module writes the non-finite floats as bare Infinity, -Infinity and NaN,
// and published configs carry them (Nemotron-H's "time_step_limit": [0.0, Infinity]);
// strict JSON has no such tokens. Outside strings they become null: a key whose value is
// one reads as absent (and the keys sparkd reads must be finite anyway).
std::string nonfinite_as_null(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (std::string_view word : {"-Infinity", "Infinity", "NaN"})
      if (text.compare(i, word.size(), word) == 0) {
        out += "null";
        i += word.size() - 1;
        replaced = true;
        break;
      }
    if (!replaced) out += c;
  }
  return out;
}

json parse_json(const std::string& text, const std::string& source) {
  try {
    json j = json::parse(nonfinite_as_null(text));
    if (!j.is_object()) throw InputError(source + ": not a JSON object");
    return j;
  } catch (const json::exception& e) {
    throw InputError(source + ": invalid JSON: " + e.what());
  }
}

std::vector<int32_t> token_ids(const json& v, const std::string& source, const std::string& key, int64_t vocab) {
  std::vector<int32_t> out;
  auto one = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab)
      throw InputError(source + ": \"" + key + "\" holds " + x.dump() + ", not a token id below vocab_size " +
                       std::to_string(vocab));
    out.push_back(static_cast<int32_t>(x.get<int64_t>()));
  };
  if (v.is_array()) {
    for (const json& x : v) one(x);
  } else if (!v.is_null()) {
    one(v);
  }
  return out;
}

DType parse_dtype(const std::string& s, const std::string& source) {
  if (s == "bfloat16") return DType::BF16;
  if (s == "float16" || s == "half") return DType::F16;
  if (s == "float32" || s == "float") return DType::F32;
  throw InputError(source + ": \"torch_dtype\" = \"" + s + "\" is not one of bfloat16, float16, float32");
}

// transformers' _compute_yarn_parameters: the factor defaults to the ratio of the context
// lengths, the attention factor to 0.1 ln(factor) + 1 (or the mscale ratio DeepSeek gives).
void parse_yarn(const ConfigReader& p, int64_t max_positions, RopeScaling& y) {
  y.original_max_position_embeddings = p.integer_or("original_max_position_embeddings", 1, MAX_POSITIONS, max_positions);
  y.factor = p.number_or("factor", double(max_positions) / double(y.original_max_position_embeddings));
  if (!(y.factor >= 1.0)) p.fail("factor", "must be at least 1");
  y.beta_fast = p.number_or("beta_fast", 32.0);
  y.beta_slow = p.number_or("beta_slow", 1.0);
  if (!(y.beta_fast > 0) || !(y.beta_slow > 0)) p.fail("beta_fast", "and beta_slow must be positive");
  y.truncate = p.boolean_or("truncate", true);
  auto mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  const double ms = p.number_or("mscale", 0), ms_all = p.number_or("mscale_all_dim", 0);
  y.attention_factor = p.has("attention_factor") ? p.number_or("attention_factor", 1.0)
                       : ms != 0 && ms_all != 0  ? mscale(y.factor, ms) / mscale(y.factor, ms_all)
                                                 : mscale(y.factor, 1.0);
  if (!(y.attention_factor > 0)) p.fail("attention_factor", "must be positive");
}

void parse_rope(const ConfigReader& r, ModelSpec& s) {
  // Transformers 5 nests RoPE settings in "rope_parameters"; older configs use
  // "rope_theta" and "rope_scaling" at the top level.
  const json* scaling = nullptr;
  s.rope_theta = r.number_or("rope_theta", 10000.0);
  if (r.has("rope_parameters")) {
    if (!r.j["rope_parameters"].is_object()) r.fail("rope_parameters", "must be an object");
    scaling = &r.j["rope_parameters"];
    ConfigReader p{*scaling, r.source};
    s.rope_theta = p.number_or("rope_theta", s.rope_theta);
  } else if (r.has("rope_scaling")) {
    if (!r.j["rope_scaling"].is_object()) r.fail("rope_scaling", "must be an object");
    scaling = &r.j["rope_scaling"];
  }
  if (!(s.rope_theta > 0)) r.fail("rope_theta", "must be positive");
  if (!scaling) return;
  read_rope_scaling(ConfigReader{*scaling, r.source}, s.max_position_embeddings, s.rope_scaling);
}

// One ModelOpt algorithm (quant_algo) into the spec's flags; `key` names it in errors.
void modelopt_algo(const std::string& algo, const std::string& key, const std::string& source, ModelSpec& s) {
  if (algo == "NVFP4" || algo == "W4A16_NVFP4")
    s.nvfp4 = true;
  else if (algo == "FP8")
    s.fp8 = true;  // one scale per tensor: fp8_block_rows / cols stay 0
  else
    throw InputError(source + ": " + key + " \"" + algo +
                     "\" is not supported (supported: NVFP4, W4A16_NVFP4, FP8 and MIXED_PRECISION of them)");
}

// A ModelOpt quantization object (config.json's quantization_config or the "quantization"
// of hf_quant_config.json): quant_algo, group_size, kv_cache_quant_algo, and for
// MIXED_PRECISION the quantized_layers map. exclude_modules needs nothing: excluded layers
// are stored 16-bit, which their tensors say.
void parse_modelopt(const json& q, const std::string& key, const std::string& source, ModelSpec& s) {
  const ConfigReader r{q, source};
  const auto text = [&](const json& v, const std::string& k) {
    if (!v.is_string()) r.fail(k, "must be a string");
    return v.get<std::string>();
  };
  if (!r.has("quant_algo")) r.fail(key + ".quant_algo", "is missing");
  const std::string algo = text(q["quant_algo"], key + ".quant_algo");
  s.modelopt = true;
  if (r.has("group_size") && !(q["group_size"].is_number_integer() && q["group_size"].get<int64_t>() == 16))
    r.fail(key + ".group_size", "must be 16 (NVFP4's block of values)");
  if (r.has("kv_cache_quant_algo")) {
    if (text(q["kv_cache_quant_algo"], key + ".kv_cache_quant_algo") != "FP8")
      r.fail(key + ".kv_cache_quant_algo", "must be FP8 or null");
    s.kv_cache_fp8 = true;
  }
  if (algo != "MIXED_PRECISION") return modelopt_algo(algo, key + ".quant_algo", source, s);
  if (!r.has("quantized_layers") || !q["quantized_layers"].is_object() || q["quantized_layers"].empty())
    r.fail(key + ".quantized_layers", "must map each quantized layer to its quant_algo for MIXED_PRECISION");
  for (const auto& [layer, c] : q["quantized_layers"].items()) {
    const std::string k = key + ".quantized_layers." + layer;
    if (!c.is_object() || !c.contains("quant_algo")) r.fail(k, "must be an object with a quant_algo");
    const std::string a = text(c["quant_algo"], k + ".quant_algo");
    modelopt_algo(a, k + ".quant_algo", source, s);
    if (c.contains("group_size") && !(c["group_size"].is_number_integer() && c["group_size"].get<int64_t>() == 16))
      r.fail(k + ".group_size", "must be 16 (NVFP4's block of values)");
    s.modelopt_layers[layer] = a;
  }
}

// quantization_config: quant_method "fp8" (e4m3 weights, 16-bit activations), "modelopt"
// (NVIDIA's checkpoints: parse_modelopt), or "mxfp4" (gpt-oss: the experts' *_blocks /
// *_scales tensors say it themselves, arch/gpt_oss_checkpoint.cpp).
void parse_quantization(const ConfigReader& r, ModelSpec& s, const json* hf_quant) {
  const json& q = r.j["quantization_config"];
  if (!q.is_object()) r.fail("quantization_config", "must be an object");
  const std::string method = q.contains("quant_method") && q["quant_method"].is_string()
                                 ? q["quant_method"].get<std::string>() : "";
  if (method == "mxfp4") {
    s.mxfp4_experts = true;
    return;
  }
  if (method == "modelopt") {
    // Older exports say only the method here and the rest in hf_quant_config.json.
    if (!q.contains("quant_algo") && hf_quant) return parse_modelopt(*hf_quant, "quantization", r.source, s);
    return parse_modelopt(q, "quantization_config", r.source, s);
  }
  if (method != "fp8")
    throw InputError(r.source + ": quantization_config.quant_method \"" + method +
                     "\" is not supported (supported: fp8, modelopt, mxfp4, and GGUF files)");
  if (q.contains("fmt") && !(q["fmt"].is_string() && q["fmt"].get<std::string>() == "e4m3"))
    r.fail("quantization_config.fmt", "must be \"e4m3\"");
  if (q.contains("activation_scheme") &&
      !(q["activation_scheme"].is_string() && q["activation_scheme"].get<std::string>() == "dynamic"))
    r.fail("quantization_config.activation_scheme", "must be \"dynamic\" (static activation scales are not supported)");
  s.fp8 = true;
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
    const json& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() < 1 || b[1].get<int64_t>() < 1 || b[0].get<int64_t>() > MAX_DIM ||
        b[1].get<int64_t>() > MAX_DIM)
      r.fail("quantization_config.weight_block_size", "must be two positive block sizes, e.g. [128, 128]");
    s.fp8_block_rows = b[0].get<int64_t>();
    s.fp8_block_cols = b[1].get<int64_t>();
  }
}

}  // namespace

void read_rope_scaling(const ConfigReader& p, int64_t max_positions, RopeScaling& out) {
  std::string type;
  for (const char* k : {"rope_type", "type"})
    if (p.has(k)) {
      if (!p.j[k].is_string()) p.fail(k, "must be a string");
      type = p.j[k].get<std::string>();
      break;
    }
  out = RopeScaling{};
  if (type.empty() || type == "default") return;
  if (type != "llama3" && type != "linear" && type != "yarn" && type != "proportional")
    throw InputError(p.source + ": rope scaling type \"" + type +
                     "\" is not supported (supported: llama3, linear, yarn, proportional)");
  out.type = type;
  if (type == "yarn") return parse_yarn(p, max_positions, out);
  out.factor = p.number_or("factor", 1.0);
  if (!(out.factor >= 1.0)) p.fail("factor", "must be at least 1");
  if (type == "proportional") {
    out.rotated_fraction = p.number_or("partial_rotary_factor", 1.0);
    if (!(out.rotated_fraction > 0 && out.rotated_fraction <= 1)) p.fail("partial_rotary_factor", "must be in (0, 1]");
  }
  if (type == "llama3") {
    out.low_freq_factor = p.number_or("low_freq_factor", 1.0);
    out.high_freq_factor = p.number_or("high_freq_factor", 4.0);
    out.original_max_position_embeddings = p.integer_or("original_max_position_embeddings", 1, MAX_POSITIONS, 8192);
    if (!(out.low_freq_factor > 0) || !(out.high_freq_factor > out.low_freq_factor))
      p.fail("high_freq_factor", "must exceed low_freq_factor, and both must be positive");
  }
}

int64_t ModelSpec::layer_head_dim(int64_t layer) const {
  return full_head_dim > 0 && !layer_is_sliding(layer) ? full_head_dim : head_dim;
}
int64_t ModelSpec::layer_num_kv_heads(int64_t layer) const {
  return full_num_kv_heads > 0 && !layer_is_sliding(layer) ? full_num_kv_heads : num_kv_heads;
}

bool ModelSpec::layer_is_moe(int64_t layer) const {
  // Transformers' Qwen3-MoE rule: a sparse block every decoder_sparse_step layers,
  // except the layers listed in mlp_only_layers.
  if (num_experts <= 0 || !layer_has_ffn(layer)) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

std::vector<int64_t> assistant_model_layers(const ModelSpec& model, const ModelSpec& assistant) {
  SPARK_CHECK(assistant.is_assistant(), "assistant_model_layers of a spec that is no assistant");
  const std::string what = "Gemma 4's assistant (" + assistant.architecture + ")";
  if (model.hidden_size != assistant.assistant_of_hidden)
    throw InputError(what + " was made for a model " + std::to_string(assistant.assistant_of_hidden) +
                     " wide (backbone_hidden_size); this model is " + std::to_string(model.hidden_size) + " wide");
  if (model.vocab_size != assistant.vocab_size)
    throw InputError(what + " has " + std::to_string(assistant.vocab_size) + " token ids, the model " +
                     std::to_string(model.vocab_size));
  if (model.sliding_window != assistant.sliding_window)
    throw InputError(what + " reads sliding windows of " + std::to_string(assistant.sliding_window) +
                     " tokens, the model's are " + std::to_string(model.sliding_window));
  std::vector<int64_t> reads(static_cast<size_t>(assistant.num_layers), -1);
  for (int64_t i = 0; i < assistant.num_layers; ++i) {
    const bool sliding = assistant.layer_is_sliding(i);
    for (int64_t l = model.num_layers; l-- > 0 && reads[size_t(i)] < 0;)
      if (model.layer_has_mixer(l) && !model.layer_is_recurrent(l) && model.layer_is_sliding(l) == sliding)
        reads[size_t(i)] = l;
    const int64_t l = reads[size_t(i)];
    const std::string layer = what + "'s layer " + std::to_string(i);
    if (l < 0)
      throw InputError(layer + " reads the model's last " + (sliding ? "sliding" : "full") +
                       "-attention layer, and the model has none");
    if (model.layer_num_kv_heads(l) != assistant.layer_num_kv_heads(i) || model.layer_head_dim(l) != assistant.layer_head_dim(i))
      throw InputError(layer + " reads " + std::to_string(assistant.layer_num_kv_heads(i)) + " KV heads of " +
                       std::to_string(assistant.layer_head_dim(i)) + " values; the model's layer " + std::to_string(l) +
                       " holds " + std::to_string(model.layer_num_kv_heads(l)) + " of " +
                       std::to_string(model.layer_head_dim(l)));
  }
  return reads;
}

ModelSpec mtp_head_spec(const ModelSpec& model) {
  SPARK_CHECK(model.mtp_layers > 0 && !model.mtp_head, "mtp_head_spec of a model without an MTP head");
  ModelSpec s = model;
  s.architecture = model.architecture + " (MTP head)";
  s.num_layers = 1;
  s.layer_recurrent.clear();
  s.layer_sliding.clear();
  s.sliding_window = 0;
  s.mlp_only_layers.clear();
  s.decoder_sparse_step = 1;
  s.mtp_layers = 0;
  s.mtp_head = true;
  s.mtp_blocks.clear();
  s.layer_ffn_only.clear();
  s.layer_mixer_only.clear();
  if (!model.mtp_blocks.empty()) {  // one block a layer: attention ('*'), or an MLP ('-') or MoE ('E')
    s.num_layers = int64_t(model.mtp_blocks.size());
    for (size_t l = 0; l < model.mtp_blocks.size(); ++l) {
      const char c = model.mtp_blocks[l];
      SPARK_CHECK(c == '*' || c == '-' || c == 'E', "mtp_blocks holds only attention, MLP and MoE blocks");
      s.layer_mixer_only.push_back(c == '*');
      s.layer_ffn_only.push_back(c != '*');
      if (c == '-') s.mlp_only_layers.push_back(int64_t(l));
    }
  }
  return s;
}

bool ModelSpec::layer_is_recurrent(int64_t layer) const {
  return layer >= 0 && layer < static_cast<int64_t>(layer_recurrent.size()) && layer_recurrent[size_t(layer)] != 0;
}

bool ModelSpec::layer_has_mixer(int64_t layer) const {
  return !(layer >= 0 && layer < static_cast<int64_t>(layer_ffn_only.size()) && layer_ffn_only[size_t(layer)] != 0);
}

bool ModelSpec::layer_has_ffn(int64_t layer) const {
  return !(layer >= 0 && layer < static_cast<int64_t>(layer_mixer_only.size()) && layer_mixer_only[size_t(layer)] != 0);
}

bool ModelSpec::layer_is_sliding(int64_t layer) const {
  return sliding_window > 0 && layer >= 0 && layer < static_cast<int64_t>(layer_sliding.size()) &&
         layer_sliding[static_cast<size_t>(layer)] != 0;
}

ModelSpec parse_hf_config(const std::string& config_text, const std::string& gen_text, const std::string& source,
                          const std::string& hf_quant_text) {
  const json top = parse_json(config_text, source);
  const ConfigReader outer{top, source};
  ModelSpec s;
  if (!outer.has("architectures") || !top["architectures"].is_array() || top["architectures"].empty() ||
      !top["architectures"][0].is_string())
    outer.fail("architectures",
               "must list the model class, e.g. [\"" + std::string(architectures().front()->hf_class) + "\"]");
  s.architecture = top["architectures"][0].get<std::string>();
  s.arch = find_hf_architecture(s.architecture);
  if (!s.arch)
    throw InputError(source + ": architecture " + s.architecture + " is not supported (supported: " +
                     hf_architecture_list() + ")");
  // A multimodal checkpoint's text model: its keys, and whatever it leaves out (dtype,
  // tied embeddings, special tokens) from the top level.
  const char* section = s.arch->text_config;
  if (section && !(outer.has(section) && top[section].is_object()))
    outer.fail(section, "must be an object holding the text model's settings");
  json j = section ? top[section] : top;
  for (const char* k : {"torch_dtype", "dtype", "tie_word_embeddings", "bos_token_id", "eos_token_id"})
    if (section && !(j.contains(k) && !j[k].is_null()) && top.contains(k)) j[k] = top[k];
  for (const char* k : s.arch->outer_keys)
    if (section && top.contains(k)) j[k] = top[k];
  if (s.arch->config_defaults) {
    const json defaults = json::parse(s.arch->config_defaults);
    for (const auto& [k, v] : defaults.items())
      if (!j.contains(k)) j[k] = v;
  }
  const std::string text_source = section ? source + " (" + section + ")" : source;
  const ConfigReader r{j, text_source};

  s.vocab_size = r.integer("vocab_size", 1, MAX_VOCAB);
  s.hidden_size = r.integer("hidden_size", 1, MAX_HIDDEN);
  s.num_layers = r.integer("num_hidden_layers", 1, MAX_LAYERS);
  s.num_heads = r.integer("num_attention_heads", 1, MAX_DIM);
  s.num_kv_heads = r.integer_or("num_key_value_heads", 1, MAX_DIM, s.num_heads);
  if (s.num_heads % s.num_kv_heads != 0)
    r.fail("num_key_value_heads", "= " + std::to_string(s.num_kv_heads) + " must divide num_attention_heads = " +
                                      std::to_string(s.num_heads));
  if (!r.has("head_dim") && s.hidden_size % s.num_heads != 0)
    r.fail("hidden_size", "must be a multiple of num_attention_heads when head_dim is not given");
  s.head_dim = r.integer_or("head_dim", 1, MAX_DIM, s.hidden_size / s.num_heads);
  if (s.head_dim % 2 != 0) r.fail("head_dim", "must be even (rotary embeddings rotate pairs)");
  if (s.num_heads * s.head_dim > MAX_DIM) r.fail("num_attention_heads", "x head_dim is implausibly large");
  s.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  if (!(s.rms_norm_eps > 0)) r.fail("rms_norm_eps", "must be positive");
  s.max_position_embeddings = r.integer_or("max_position_embeddings", 1, MAX_POSITIONS, 2048);
  parse_rope(r, s);
  s.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);
  std::string dtype = "bfloat16";
  for (const char* k : {"torch_dtype", "dtype"})
    if (r.has(k)) {
      if (!j[k].is_string()) r.fail(k, "must be a string");
      dtype = j[k].get<std::string>();
      break;
    }
  s.dtype = parse_dtype(dtype, source);
  // A ModelOpt export's hf_quant_config.json: {"producer": ..., "quantization": {...}}.
  json hf_quant;
  const std::string hf_quant_source = source + " (hf_quant_config.json)";
  if (!hf_quant_text.empty()) {
    const json h = parse_json(hf_quant_text, hf_quant_source);
    if (!h.is_object() || !h.contains("quantization") || !h["quantization"].is_object())
      throw InputError(hf_quant_source + ": \"quantization\" must be an object");
    hf_quant = h["quantization"];
  }
  if (outer.has("quantization_config"))
    parse_quantization(outer, s, hf_quant.is_null() ? nullptr : &hf_quant);
  else if (!hf_quant.is_null())
    parse_modelopt(hf_quant, "quantization", hf_quant_source, s);

  s.arch->read_config(r, s);

  if (r.has("bos_token_id")) {
    auto b = token_ids(j["bos_token_id"], source, "bos_token_id", s.vocab_size);
    if (!b.empty()) s.bos_token_id = b[0];
  }
  if (r.has("eos_token_id")) s.eos_token_ids = token_ids(j["eos_token_id"], source, "eos_token_id", s.vocab_size);
  if (!gen_text.empty()) {
    std::string gsrc = source + " (generation_config.json)";
    json g = parse_json(gen_text, gsrc);
    if (g.contains("eos_token_id") && !g["eos_token_id"].is_null())
      s.eos_token_ids = token_ids(g["eos_token_id"], gsrc, "eos_token_id", s.vocab_size);
    if (g.contains("bos_token_id") && !g["bos_token_id"].is_null()) {
      auto b = token_ids(g["bos_token_id"], gsrc, "bos_token_id", s.vocab_size);
      if (!b.empty()) s.bos_token_id = b[0];
    }
  }
  return s;
}

namespace {
std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw InputError("cannot read '" + p.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (16u << 20)) throw InputError("'" + p.string() + "' is larger than 16 MiB");
  return ss.str();
}
}  // namespace

ModelSpec load_hf_spec(const std::string& dir) {
  namespace fs = std::filesystem;
  fs::path cfg = fs::path(dir) / "config.json";
  if (!fs::is_regular_file(cfg)) throw InputError("model folder '" + dir + "' has no config.json");
  fs::path gen = fs::path(dir) / "generation_config.json";
  std::string gen_text = fs::is_regular_file(gen) ? read_text(gen) : "";
  fs::path hf_quant = fs::path(dir) / "hf_quant_config.json";
  return parse_hf_config(read_text(cfg), gen_text, cfg.string(),
                         fs::is_regular_file(hf_quant) ? read_text(hf_quant) : "");
}

}  // namespace spark
