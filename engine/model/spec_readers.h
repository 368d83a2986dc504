// spec_readers.h — checked reads of a config.json object and of GGUF metadata, shared by
// the common part of the model description (model_spec.cpp, gguf_spec.cpp) and by each
// architecture's own keys (engine/model/arch/). Every failure is an InputError naming the
// file and the key.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/model/gguf.h"
#include "engine/model/model_spec.h"
#include "engine/util/check.h"

namespace spark {

// Upper bounds far above any real model; they keep later size arithmetic (bytes of the
// KV cache, parameter counts) well inside 64 bits whatever a file says.
inline constexpr int64_t MAX_DIM = 1 << 20;
inline constexpr int64_t MAX_HIDDEN = 1 << 17;
inline constexpr int64_t MAX_VOCAB = 1 << 24;
inline constexpr int64_t MAX_LAYERS = 1 << 10;
inline constexpr int64_t MAX_EXPERTS = 1 << 10;
inline constexpr int64_t MAX_POSITIONS = 1ll << 26;

// One JSON object of a Hugging Face config (the whole config.json, or a nested object).
struct ConfigReader {
  const nlohmann::json& j;
  const std::string& source;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(source + ": \"" + key + "\" " + what);
  }
  bool has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi) const {
    if (!has(key)) fail(key, "is missing");
    return integer_or(key, lo, hi, 0);
  }
  int64_t integer_or(const std::string& key, int64_t lo, int64_t hi, int64_t fallback) const {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer()) fail(key, "must be an integer");
    int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi) ? hi + 1 : v.get<int64_t>();
    if (x < lo || x > hi)
      fail(key, "= " + v.dump() + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }
  double number_or(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_number()) fail(key, "must be a number");
    double x = j[key].get<double>();
    if (!std::isfinite(x)) fail(key, "must be finite");
    return x;
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) fail(key, "must be true or false");
    return j[key].get<bool>();
  }
};

// A RoPE scaling object (rope_scaling, rope_parameters, or one layer type's entry of
// rope_parameters): its type ("rope_type" or "type": default, llama3, linear, yarn) and that
// type's keys, into `out` (reset first); `max_positions` is YaRN's default context. Throws
// InputError naming the key.
void read_rope_scaling(const ConfigReader& scaling, int64_t max_positions, RopeScaling& out);

// The "<general.architecture>.*" keys of a GGUF file.
struct GgufMetaReader {
  const GgufFile& f;
  std::string arch;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError("GGUF file '" + f.source + "': " + key + " " + what);
  }
  int64_t integer(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> fallback = {}) const {
    std::string k = arch + "." + key;
    const GgufValue* v = f.find(k);
    if (v && v->type == GgufType::ARRAY) fail(k, "varies per layer, which is not supported");
    auto x = f.get_int(k);
    if (!x) {
      if (!fallback) fail(k, "is missing");
      return *fallback;
    }
    if (*x < lo || *x > hi) fail(k, "= " + std::to_string(*x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return *x;
  }
  double number(const std::string& key, double fallback) const {
    auto x = f.get_float(arch + "." + key);
    if (x && !std::isfinite(*x)) fail(arch + "." + key, "is not finite");
    return x.value_or(fallback);
  }
};

}  // namespace spark
