// pattern.cpp — literal and regex patterns shared by the Split, Replace and decoder stages.
#include "engine/tokenizer/pattern.h"

#include <nlohmann/json.hpp>

#include "engine/util/check.h"

namespace spark {

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

Pattern Pattern::regex(const std::string& re) {
  Pattern p;
  p.regex_ = std::make_shared<Regex>(re);
  return p;
}

Pattern Pattern::from_json(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_string()) return literal(spec.get<std::string>());
  if (spec.is_object()) {
    if (spec.contains("String") && spec["String"].is_string()) return literal(spec["String"].get<std::string>());
    if (spec.contains("Regex") && spec["Regex"].is_string()) return regex(spec["Regex"].get<std::string>());
  }
  throw InputError(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

void Pattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != std::string_view::npos) {
    out.emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  std::vector<std::pair<size_t, size_t>> m;
  find_all(text, m);
  if (m.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + m.size() * content.size());
  size_t prev = 0;
  for (auto [s, e] : m) {
    out.append(text.substr(prev, s - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace spark
