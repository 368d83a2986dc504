// config.cpp — spark.toml parsing: a table of known keys, their types and ranges, then
// the checks that span several keys. Every error names where the value came from.
#include "engine/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <toml++/toml.h>
#include <variant>

#include "engine/config_location.h"
#include "engine/config_models.h"
#include "engine/util/check.h"

namespace spark {
namespace {

enum class KeyType { STRING, INT, FLOAT, BOOL, STRING_LIST, STRING_OR_INT };
using Value = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;

struct KeySpec {
  const char* section;
  const char* key;
  KeyType type;
  std::vector<std::string> choices;  // allowed strings, if restricted
  double min = -INFINITY, max = INFINITY;
  std::function<void(Config&, const Value&)> set;
};

template <typename T>
std::function<void(Config&, const Value&)> setter(T Config::*section_member, auto member) {
  return [section_member, member](Config& c, const Value& v) {
    auto& field = (c.*section_member).*member;
    using F = std::remove_reference_t<decltype(field)>;
    if constexpr (std::is_same_v<F, double>) {
      field = std::holds_alternative<int64_t>(v) ? double(std::get<int64_t>(v)) : std::get<double>(v);
    } else {
      field = std::get<F>(v);
    }
  };
}

const std::vector<KeySpec>& key_specs() {
  using C = Config;
  static const std::vector<KeySpec> specs = {
      {"model", "path", KeyType::STRING, {}, 0, 0, setter(&C::model, &ModelConfig::path)},
      {"model", "name", KeyType::STRING, {}, 0, 0, setter(&C::model, &ModelConfig::name)},
      {"model", "dtype", KeyType::STRING, {"auto", "bf16", "fp16"}, 0, 0, setter(&C::model, &ModelConfig::dtype)},
      {"model", "load_format", KeyType::STRING, {"auto", "dummy"}, 0, 0, setter(&C::model, &ModelConfig::load_format)},
      {"model", "max_model_len", KeyType::INT, {}, 0, 16 << 20, setter(&C::model, &ModelConfig::max_model_len)},
      {"model", "chat_template", KeyType::STRING, {}, 0, 0, setter(&C::model, &ModelConfig::chat_template)},
      {"model", "tokenizer", KeyType::STRING, {}, 0, 0, setter(&C::model, &ModelConfig::tokenizer)},
      {"model", "quantize", KeyType::STRING, {"none", "fp8", "q8_0"}, 0, 0, setter(&C::model, &ModelConfig::quantize)},
      {"model", "quantize_keep", KeyType::STRING_LIST, {}, 0, 0, setter(&C::model, &ModelConfig::quantize_keep)},
      {"model", "role", KeyType::STRING, {"chat", "embed", "rerank"}, 0, 0, setter(&C::model, &ModelConfig::role)},
      // Only in [[models]] tables, which take every [model] key besides (in_section).
      {"models", "memory_share", KeyType::FLOAT, {}, 0, 1, setter(&C::model, &ModelConfig::memory_share)},

      {"engine", "backend", KeyType::STRING, {"auto", "cuda", "cpu"}, 0, 0, setter(&C::engine, &EngineConfig::backend)},
      {"engine", "max_num_seqs", KeyType::INT, {}, 1, 4096, setter(&C::engine, &EngineConfig::max_num_seqs)},
      {"engine", "max_num_batched_tokens", KeyType::INT, {}, 1, 1 << 20, setter(&C::engine, &EngineConfig::max_num_batched_tokens)},
      {"engine", "block_size", KeyType::INT, {}, 1, 256, setter(&C::engine, &EngineConfig::block_size)},
      {"engine", "kv_cache_dtype", KeyType::STRING, {"auto", "fp8"}, 0, 0, setter(&C::engine, &EngineConfig::kv_cache_dtype)},
      {"engine", "memory_fraction", KeyType::FLOAT, {}, 0.01, 1.0, setter(&C::engine, &EngineConfig::memory_fraction)},
      {"engine", "enable_prefix_caching", KeyType::BOOL, {}, 0, 0, setter(&C::engine, &EngineConfig::enable_prefix_caching)},
      {"engine", "enable_chunked_prefill", KeyType::BOOL, {}, 0, 0, setter(&C::engine, &EngineConfig::enable_chunked_prefill)},
      {"engine", "cuda_graphs", KeyType::BOOL, {}, 0, 0, setter(&C::engine, &EngineConfig::cuda_graphs)},
      {"engine", "cpu_threads", KeyType::INT, {}, 0, 1024, setter(&C::engine, &EngineConfig::cpu_threads)},
      {"engine", "speculative", KeyType::STRING, {"none", "ngram", "draft", "mtp"}, 0, 0, setter(&C::engine, &EngineConfig::speculative)},
      {"engine", "speculative_model", KeyType::STRING, {}, 0, 0, setter(&C::engine, &EngineConfig::speculative_model)},
      {"engine", "num_speculative_tokens", KeyType::INT, {}, 1, 16, setter(&C::engine, &EngineConfig::num_speculative_tokens)},
      {"engine", "prompt_lookup_min", KeyType::INT, {}, 1, 64, setter(&C::engine, &EngineConfig::prompt_lookup_min)},
      {"engine", "prompt_lookup_max", KeyType::INT, {}, 1, 64, setter(&C::engine, &EngineConfig::prompt_lookup_max)},
      {"engine", "state_checkpoints", KeyType::INT, {}, -1, 8192, setter(&C::engine, &EngineConfig::state_checkpoints)},

      {"server", "host", KeyType::STRING, {}, 0, 0, setter(&C::server, &ServerConfig::host)},
      {"server", "port", KeyType::INT, {}, 0, 65535, setter(&C::server, &ServerConfig::port)},
      {"server", "api_keys", KeyType::STRING_LIST, {}, 0, 0, setter(&C::server, &ServerConfig::api_keys)},
      {"server", "api_key_file", KeyType::STRING, {}, 0, 0, setter(&C::server, &ServerConfig::api_key_file)},
      {"server", "max_queued_requests", KeyType::INT, {}, 0, 1 << 20, setter(&C::server, &ServerConfig::max_queued_requests)},
      {"server", "max_stored_responses", KeyType::INT, {}, 0, 1 << 20, setter(&C::server, &ServerConfig::max_stored_responses)},
      {"server", "max_body_bytes", KeyType::INT, {}, 1024, int64_t(1) << 30, setter(&C::server, &ServerConfig::max_body_bytes)},
      {"server", "request_timeout_s", KeyType::FLOAT, {}, 0.001, 7 * 86400, setter(&C::server, &ServerConfig::request_timeout_s)},
      {"server", "drain_timeout_s", KeyType::FLOAT, {}, 0, 86400, setter(&C::server, &ServerConfig::drain_timeout_s)},
      {"server", "cors_origins", KeyType::STRING_LIST, {}, 0, 0, setter(&C::server, &ServerConfig::cors_origins)},
      {"server", "dashboard", KeyType::BOOL, {}, 0, 0, setter(&C::server, &ServerConfig::dashboard)},
      {"server", "dashboard_auth", KeyType::STRING, {"public", "api_key"}, 0, 0, setter(&C::server, &ServerConfig::dashboard_auth)},
      {"server", "replica_name", KeyType::STRING, {}, 0, 0, setter(&C::server, &ServerConfig::replica_name)},

      {"peer", "enabled", KeyType::BOOL, {}, 0, 0, setter(&C::peer, &PeerConfig::enabled)},
      {"peer", "role", KeyType::STRING, {"head", "worker"}, 0, 0, setter(&C::peer, &PeerConfig::role)},
      {"peer", "head_addr", KeyType::STRING, {}, 0, 0, setter(&C::peer, &PeerConfig::head_addr)},
      {"peer", "transport", KeyType::STRING, {"nccl", "tcp"}, 0, 0, setter(&C::peer, &PeerConfig::transport)},
      {"peer", "nccl_ifname", KeyType::STRING, {}, 0, 0, setter(&C::peer, &PeerConfig::nccl_ifname)},
      {"peer", "nccl_ib_hca", KeyType::STRING, {}, 0, 0, setter(&C::peer, &PeerConfig::nccl_ib_hca)},
      {"peer", "layer_split", KeyType::STRING_OR_INT, {}, 1, 1 << 16, setter(&C::peer, &PeerConfig::layer_split)},
      {"peer", "timeout_s", KeyType::FLOAT, {}, 0.1, 3600, setter(&C::peer, &PeerConfig::timeout_s)},

      {"log", "level", KeyType::STRING, {"debug", "info", "warn", "error"}, 0, 0, setter(&C::log, &LogConfig::level)},
      {"log", "format", KeyType::STRING, {"text", "json"}, 0, 0, setter(&C::log, &LogConfig::format)},
  };
  return specs;
}

std::string type_name(KeyType t) {
  switch (t) {
    case KeyType::STRING: return "a string";
    case KeyType::INT: return "an integer";
    case KeyType::FLOAT: return "a number";
    case KeyType::BOOL: return "true or false";
    case KeyType::STRING_LIST: return "a list of strings";
    case KeyType::STRING_OR_INT: return "\"auto\" or an integer";
  }
  return "?";
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// A [[models]] table takes the [model] keys and its own.
bool in_section(const KeySpec& s, const std::string& section) {
  return s.section == section || (section == "models" && std::string(s.section) == "model");
}

std::string known_keys_hint(const std::string& section, const std::string& key) {
  std::string best, all;
  size_t best_d = 3;
  for (const auto& s : key_specs()) {
    if (!in_section(s, section)) continue;
    all += all.empty() ? s.key : std::string(", ") + s.key;
    size_t d = edit_distance(key, s.key);
    if (d < best_d) best_d = d, best = s.key;
  }
  return (best.empty() ? "" : "did you mean '" + best + "'? ") + "known keys: " + all;
}

const KeySpec* find_spec(const std::string& section, const std::string& key) {
  for (const auto& s : key_specs())
    if (in_section(s, section) && s.key == key) return &s;
  return nullptr;
}

[[noreturn]] void fail(const ConfigOrigin& at, const std::string& what) {
  throw InputError(at.prefix + ": " + what + at.quote);
}

// Where each "section.key" (and each "section") was set: the file's line or the --set flag.
using Origins = std::map<std::string, ConfigOrigin>;

std::string describe_accepted(const KeySpec& s) {
  if (!s.choices.empty()) {
    std::string out = "one of";
    for (size_t i = 0; i < s.choices.size(); ++i) out += (i ? ", \"" : " \"") + s.choices[i] + "\"";
    return out;
  }
  std::ostringstream o;
  o << type_name(s.type);
  if ((s.type == KeyType::INT || s.type == KeyType::FLOAT) && std::isfinite(s.min))
    o << " from " << s.min << " to " << s.max;
  return o.str();
}

// How messages name the key: "[engine] max_num_seqs", or "[[models]] path" inside one.
std::string key_label(const KeySpec& s, const std::string& table) {
  return (table.empty() ? std::string("[") + s.section + "]" : table) + " " + s.key;
}

// Range and choice checks shared by the file and --set paths.
void check_value(const KeySpec& s, const Value& v, const ConfigOrigin& where, const std::string& shown,
                 const std::string& table = "") {
  std::string key = key_label(s, table);
  auto bad = [&](const std::string& why) {
    fail(where, key + " = " + shown + ": " + why + "; accepted: " + describe_accepted(s));
  };
  if (!s.choices.empty() && std::find(s.choices.begin(), s.choices.end(), std::get<std::string>(v)) == s.choices.end())
    bad("not an accepted value");
  if (s.type == KeyType::INT || s.type == KeyType::FLOAT) {
    double d = std::holds_alternative<int64_t>(v) ? double(std::get<int64_t>(v)) : std::get<double>(v);
    if (!std::isfinite(d) || d < s.min || d > s.max) bad("out of range");
  }
  if (s.type == KeyType::STRING_OR_INT) {
    const std::string& text = std::get<std::string>(v);
    if (text != "auto") {
      char* end = nullptr;
      long long n = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0') bad("not \"auto\" or an integer");
      if (n < s.min || n > s.max) bad("out of range");
    }
  }
}

std::string show(const toml::node& node) {
  std::ostringstream o;
  node.visit([&](const auto& n) { o << n; });
  return o.str();
}

ConfigOrigin where_of(const std::string& source, std::string_view text, const toml::source_region& r) {
  return origin_in_text(source, text, int(r.begin.line), int(r.begin.column));
}

Value value_from_toml(const KeySpec& s, const toml::node& node, const ConfigOrigin& where, const std::string& table = "") {
  std::string key = key_label(s, table);
  auto wrong = [&]() -> Value {
    fail(where, key + " = " + show(node) + ": wrong type; accepted: " + describe_accepted(s));
  };
  switch (s.type) {
    case KeyType::STRING:
      if (auto v = node.value_exact<std::string>()) return *v;
      return wrong();
    case KeyType::INT:
      if (auto v = node.value_exact<int64_t>()) return *v;
      return wrong();
    case KeyType::FLOAT:
      if (auto v = node.value_exact<double>()) return *v;
      if (auto v = node.value_exact<int64_t>()) return double(*v);
      return wrong();
    case KeyType::BOOL:
      if (auto v = node.value_exact<bool>()) return *v;
      return wrong();
    case KeyType::STRING_OR_INT:
      if (auto v = node.value_exact<std::string>()) return *v;
      if (auto v = node.value_exact<int64_t>()) return std::to_string(*v);
      return wrong();
    case KeyType::STRING_LIST: {
      const toml::array* arr = node.as_array();
      if (!arr) return wrong();
      std::vector<std::string> out;
      for (const auto& item : *arr) {
        auto v = item.value_exact<std::string>();
        if (!v) return wrong();
        out.push_back(*v);
      }
      return out;
    }
  }
  return wrong();
}

// "--set section.key=value": the value text is read as the key's type.
void apply_override(Config& config, const std::string& text, Origins& origins) {
  ConfigOrigin where{"--set " + text, ""};
  size_t eq = text.find('='), dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    fail(where, "expected section.key=value");
  std::string section = text.substr(0, dot), key = text.substr(dot + 1, eq - dot - 1), raw = text.substr(eq + 1);
  // An array of tables has no one key to address; model.KEY sets the first [[models]] entry.
  if (section == "models")
    fail(where, "[[models]] entries are not set with --set; model." + key + "=... sets the first of them");
  const KeySpec* s = find_spec(section, key);
  if (!s) {
    bool known_section = std::any_of(key_specs().begin(), key_specs().end(),
                                     [&](const KeySpec& k) { return k.section == section; });
    if (!known_section) fail(where, "unknown section [" + section + "]; known: model, engine, server, peer, log");
    fail(where, "unknown key '" + key + "' in [" + section + "]; " + known_keys_hint(section, key));
  }
  // Parse the value as a one-line TOML document so quoting and arrays work as in the file;
  // a bare word is taken as a string for string-typed keys.
  Value v;
  try {
    toml::table t = toml::parse("v = " + raw);
    v = value_from_toml(*s, *t.get("v"), where);
  } catch (const toml::parse_error&) {
    if (s->type != KeyType::STRING && s->type != KeyType::STRING_OR_INT)
      fail(where, std::string("[") + s->section + "] " + s->key + " = " + raw + ": wrong type; accepted: " +
                      describe_accepted(*s));
    v = raw;
  }
  check_value(*s, v, where, raw);
  s->set(config, v);
  origins[section + "." + key] = where;
}

// The name travels in an HTTP header and in Prometheus labels: keep it to characters that
// need no escaping in either.
bool valid_replica_name(const std::string& name) {
  return name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char ch) {
           return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == ':' || ch == '-';
         });
}

using OriginKeys = std::vector<std::string>;

// Throws at the first of `keys` that was set (or, none set, at the file).
[[noreturn]] void fail_at(const Config& c, const Origins& origins, const std::string& what, const OriginKeys& keys) {
  for (const std::string& k : keys)
    if (auto it = origins.find(k); it != origins.end()) fail(it->second, what);
  fail({c.source, ""}, what);
}

// The checks of one model's keys. Model `index` of a [[models]] config is "models.<index>"
// in `origins`; the first is also reached by "model.KEY" (--set addresses it so).
void validate_model(const Config& c, const Origins& origins, size_t index, bool array_form) {
  const ModelConfig& m = c.models[index];
  const std::string table = array_form ? "[[models]] '" + served_model_name(m) + "'" : "[model]";
  auto keys = [&](std::initializer_list<const char*> names) {
    OriginKeys out;
    for (const char* n : names) {
      std::string name(n);
      if (name.rfind("model.", 0) == 0) {
        const std::string key = name.substr(6);
        if (index == 0) out.push_back(name);
        if (array_form) out.push_back("models." + std::to_string(index) + "." + key);
      } else if (name == "model") {
        out.push_back(array_form ? "models." + std::to_string(index) : "model");
      } else {
        out.push_back(name);
      }
    }
    return out;
  };
  auto bad = [&](const std::string& what, std::initializer_list<const char*> names) {
    fail_at(c, origins, what, keys(names));
  };
  if (!c.engine.enable_chunked_prefill && m.max_model_len > c.engine.max_num_batched_tokens)
    bad("[engine] enable_chunked_prefill = false needs max_num_batched_tokens (" +
        std::to_string(c.engine.max_num_batched_tokens) + ") >= " + table + " max_model_len (" +
        std::to_string(m.max_model_len) + ") so a whole prompt fits in one step", {"engine.enable_chunked_prefill"});
  for (const std::string& part : m.quantize_keep)
    if (part != "attention" && part != "mlp" && part != "experts" && part != "lm_head" && part != "embedding")
      bad(table + " quantize_keep: \"" + part +
              "\" is not one of \"attention\", \"mlp\", \"experts\", \"lm_head\", \"embedding\"",
          {"model.quantize_keep"});
  if (m.pools() && c.engine.speculative != "none")
    bad(table + " role = \"" + m.role + "\" generates nothing to speculate on; set [engine] speculative = \"none\"",
        {"model.role", "engine.speculative"});
  if (m.pools() && c.peer.enabled)
    bad(table + " role = \"" + m.role + "\" is served by one box; a pair ([peer] enabled) serves chat models",
        {"model.role", "peer.enabled"});
  if (m.load_format != "dummy" && m.path.empty())
    bad(table + " path is empty: set it to a Hugging Face model folder or a .gguf file", {"model.path", "model"});
}

// Each contradiction points at the first of its keys that was set (or its section, or the file).
void validate_whole(const Config& c, const Origins& origins) {
  auto bad = [&](const std::string& what, std::initializer_list<const char*> keys) {
    fail_at(c, origins, what, OriginKeys(keys.begin(), keys.end()));
  };
  if (c.engine.block_size & (c.engine.block_size - 1))
    bad("[engine] block_size = " + std::to_string(c.engine.block_size) + ": must be a power of two (1..256)", {"engine.block_size"});
  if (c.engine.max_num_batched_tokens < c.engine.max_num_seqs)
    bad("[engine] max_num_batched_tokens (" + std::to_string(c.engine.max_num_batched_tokens) +
        ") is below max_num_seqs (" + std::to_string(c.engine.max_num_seqs) +
        "): every running sequence needs at least one token per step", {"engine.max_num_batched_tokens", "engine.max_num_seqs"});
  if (c.engine.prompt_lookup_min > c.engine.prompt_lookup_max)
    bad("[engine] prompt_lookup_min (" + std::to_string(c.engine.prompt_lookup_min) + ") exceeds prompt_lookup_max (" +
        std::to_string(c.engine.prompt_lookup_max) + ")", {"engine.prompt_lookup_min", "engine.prompt_lookup_max"});
  if (c.engine.speculative == "draft" && c.engine.speculative_model.empty())
    bad("[engine] speculative = \"draft\" needs speculative_model, the draft model's folder or .gguf",
        {"engine.speculative", "engine.speculative_model"});
  if (c.engine.speculative != "draft" && !c.engine.speculative_model.empty())
    bad("[engine] speculative_model names a draft model, which only speculative = \"draft\" runs (speculative is \"" +
            c.engine.speculative + "\")",
        {"engine.speculative", "engine.speculative_model"});
  if (c.server.dashboard_auth == "api_key" && c.server.api_keys.empty() && c.server.api_key_file.empty())
    bad("[server] dashboard_auth = \"api_key\" but no api_keys or api_key_file is set", {"server.dashboard_auth"});
  if (!valid_replica_name(c.server.replica_name))
    bad("[server] replica_name = \"" + c.server.replica_name +
        "\": use up to 64 letters, digits and . _ : - (it goes into a response header and metric labels)", {"server.replica_name"});
  for (const auto& k : c.server.api_keys)
    if (k.size() < 8) bad("[server] api_keys: a key shorter than 8 characters is refused", {"server.api_keys"});
  if (c.peer.enabled && c.peer.head_addr.empty())
    bad("[peer] enabled = true needs head_addr (host:port of the head's control channel)", {"peer.enabled"});
  if (c.peer.enabled && c.peer.transport == "nccl" && c.engine.backend == "cpu")
    bad("[peer] transport = \"nccl\" needs the CUDA backend, but [engine] backend = \"cpu\"; use transport = \"tcp\"", {"peer.transport", "engine.backend"});
  const bool array_form = origins.count("models") > 0;
  validate_models(c, [&](const std::string& what, const OriginKeys& keys) { fail_at(c, origins, what, keys); });
  for (size_t i = 0; i < c.models.size(); ++i) validate_model(c, origins, i, array_form);
}

// Each [[models]] table: the [model] keys and memory_share, typed and ranged alike.
void apply_models_array(Config& config, const toml::node& node, const ConfigOrigin& where, const std::string& source,
                        std::string_view text, Origins& origins) {
  const toml::array* tables = node.as_array();
  if (!tables || tables->empty() || !tables->is_array_of_tables())
    fail(where, "models: write each model as a [[models]] table (the [model] keys plus memory_share)");
  for (size_t i = 0; i < tables->size(); ++i) {
    const toml::table& table = *(*tables)[i].as_table();
    const std::string tag = "models." + std::to_string(i);
    Config scratch;  // the setters write a Config's model; this entry's starts from the defaults
    for (auto&& [key_node, value_node] : table) {
      std::string key(key_node.str());
      ConfigOrigin kwhere = where_of(source, text, key_node.source());
      const KeySpec* s = find_spec("models", key);
      if (!s) fail(kwhere, "unknown key '" + key + "' in [[models]]; " + known_keys_hint("models", key));
      Value v = value_from_toml(*s, value_node, kwhere, "[[models]]");
      check_value(*s, v, kwhere, show(value_node), "[[models]]");
      if (key == "memory_share" && std::get<double>(v) <= 0)
        fail(kwhere, "[[models]] memory_share = " + show(value_node) +
                         ": out of range; accepted: a fraction above 0, up to 1, of the box's budget");
      s->set(scratch, v);
      origins[tag + "." + key] = kwhere;
    }
    origins[tag] = where_of(source, text, table.source());
    config.models.push_back(std::move(scratch.model));
  }
  origins["models"] = where;
}

void apply_table(Config& config, const toml::table& root, const std::string& source, std::string_view text,
                 Origins& origins) {
  for (auto&& [section_key, section_node] : root) {
    std::string section(section_key.str());
    ConfigOrigin where = where_of(source, text, section_key.source());
    if (section == "models" && !section_node.is_table()) {
      apply_models_array(config, section_node, where, source, text, origins);
      continue;
    }
    if (section == "models")
      fail(where, "[models] is one table; several models are [[models]] tables (double brackets), one per model");
    const toml::table* table = section_node.as_table();
    bool known = std::any_of(key_specs().begin(), key_specs().end(),
                             [&](const KeySpec& k) { return k.section == section; });
    if (!known || !table)
      fail(where, "unknown " + std::string(table ? "section [" + section + "]" : "top-level key '" + section + "'") +
                      "; known sections: [model], [[models]], [engine], [server], [peer], [log]");
    for (auto&& [key_node, value_node] : *table) {
      std::string key(key_node.str());
      ConfigOrigin kwhere = where_of(source, text, key_node.source());
      const KeySpec* s = find_spec(section, key);
      if (!s) fail(kwhere, "unknown key '" + key + "' in [" + section + "]; " + known_keys_hint(section, key));
      Value v = value_from_toml(*s, value_node, kwhere);
      check_value(*s, v, kwhere, show(value_node));
      s->set(config, v);
      origins[section + "." + key] = kwhere;
    }
    origins[section] = where;
  }
  if (origins.count("model") && origins.count("models")) {
    fail(origins.at("models"),
         "both [model] and [[models]] are given: use [model] for one model or [[models]] tables for several, not both");
  }
}

}  // namespace

Config parse_config(const std::string& toml_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  Config config;
  config.source = source;
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    std::string key = key_on_line(toml_text, int(e.source().begin.line));
    fail(where_of(source, toml_text, e.source()),
         (key.empty() ? "" : key + ": ") + "invalid TOML: " + std::string(e.description()));
  }
  Origins origins;
  apply_table(config, root, source, toml_text, origins);
  // `model` is the first model either way, so --set model.KEY and every caller that
  // knows one model address [[models]]'s first entry.
  if (!config.models.empty()) config.model = config.models[0];
  for (const auto& o : overrides) apply_override(config, o, origins);
  if (config.models.empty()) config.models.push_back(config.model);
  else config.models[0] = config.model;
  validate_whole(config, origins);
  return config;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the config file");
  std::ostringstream text;
  text << in.rdbuf();
  Config config = parse_config(text.str(), path, overrides);
  // Relative file paths in a config file are relative to that file, so a unit started
  // from any working directory finds the same files.
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  auto resolve = [&dir](std::string* p) {
    if (!p->empty() && std::filesystem::path(*p).is_relative()) *p = (dir / *p).lexically_normal().string();
  };
  for (ModelConfig& m : config.models)
    for (std::string* p : {&m.path, &m.chat_template, &m.tokenizer}) resolve(p);
  config.model = config.models[0];
  for (std::string* p : {&config.engine.speculative_model, &config.server.api_key_file}) resolve(p);
  return config;
}

Config config_for_model(const std::string& model_path) {
  Config config;
  config.source = "--model";
  config.model.path = model_path;
  config.models = {config.model};
  return config;
}

}  // namespace spark
