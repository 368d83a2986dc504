// input_errors.h — what the unit tests of hostile input share: the message of the InputError
// a config text or a tokenizer.json throws, or "" when it is accepted.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"

namespace spark::testing {

inline std::string config_error_of(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(text, "t.toml", overrides);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

inline std::unique_ptr<Tokenizer> tokenizer_from(const nlohmann::json& j) {
  return Tokenizer::from_json_text(j.dump(), "");
}

inline std::string tokenizer_error_of(const nlohmann::json& j) {
  try {
    tokenizer_from(j);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace spark::testing
