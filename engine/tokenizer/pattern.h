// pattern.h — the {"String": ...} / {"Regex": ...} patterns that Split, Replace and the Replace
// decoder take in tokenizer.json.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/tokenizer/regex.h"

namespace spark {

class Pattern {
 public:
  static Pattern literal(std::string text);
  static Pattern regex(const std::string& re);
  // Parses {"String": s} or {"Regex": r}; `where` names the field in error messages.
  static Pattern from_json(const nlohmann::json& spec, const std::string& where);

  // Non-overlapping matches, left to right, as [start, end) byte ranges.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // Replaces every match with `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;
  bool is_literal() const { return !regex_; }
  const std::string& literal_text() const { return literal_; }

 private:
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

}  // namespace spark
