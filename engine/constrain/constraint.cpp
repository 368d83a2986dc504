// constraint.cpp — building grammars from constraint specs, and the compiled-grammar cache.
#include "engine/constrain/constraint.h"

#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine/constrain/gemma_arguments.h"
#include "engine/constrain/json_schema.h"
#include "engine/constrain/regex.h"
#include "engine/constrain/xml_parameters.h"
#include "engine/util/check.h"

namespace spark::constrain {
namespace {

constexpr size_t kMaxCachedGrammars = 256;
constexpr size_t kMaxCachedKeyBytes = 256 * 1024;
constexpr size_t kMaxChoices = 10'000;

nlohmann::ordered_json parse_schema(const std::string& text) {
  try {
    return nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("JSON schema: not valid JSON: ") + e.what());
  }
}

}  // namespace

std::string ConstraintSpec::cache_key() const {
  std::string key = std::to_string(int(kind)) + (strict ? "s" : "-") + "\n" + schema + "\n" + regex + "\n";
  for (const auto& c : choices) key += std::to_string(c.size()) + ":" + c;
  key += "\n";
  for (const auto& [open, params] : tools) key += std::to_string(open.size()) + ":" + open + params + "\n";
  return key + closing;
}

Grammar build_grammar(const ConstraintSpec& spec) {
  GrammarBuilder b;
  uint32_t root = 0;
  switch (spec.kind) {
    case ConstraintSpec::Kind::JSON_SCHEMA:
      root = add_json_schema(b, parse_schema(spec.schema), {spec.strict});
      break;
    case ConstraintSpec::Kind::JSON_OBJECT:
      root = add_any_json_object(b);
      break;
    case ConstraintSpec::Kind::REGEX:
      root = add_regex(b, spec.regex, RegexContext::TEXT);
      break;
    case ConstraintSpec::Kind::CHOICE: {
      if (spec.choices.empty()) throw InputError("choice: at least one choice is needed");
      if (spec.choices.size() > kMaxChoices) throw InputError("choice: more than " + std::to_string(kMaxChoices) + " choices");
      root = b.new_rule();
      for (const auto& c : spec.choices) b.add_alt(root, b.literal(c));
      break;
    }
    case ConstraintSpec::Kind::TOOL_CALL:
    case ConstraintSpec::Kind::XML_TOOL_CALL:
    case ConstraintSpec::Kind::GEMMA_TOOL_CALL: {
      if (spec.tools.empty()) throw InputError("tool call: no function to call");
      // The closing tag is an added token in the real tokenizers (</tool_call>, <tool_call|>).
      if (!spec.closing.empty()) b.add_marker(spec.closing);
      root = b.new_rule();
      for (const auto& [opening, params] : spec.tools) {
        std::vector<Elem> seq = b.literal(opening);
        const auto schema = parse_schema(params);
        seq.push_back(GrammarBuilder::call(spec.kind == ConstraintSpec::Kind::TOOL_CALL       ? add_json_schema(b, schema)
                                           : spec.kind == ConstraintSpec::Kind::XML_TOOL_CALL ? add_xml_parameters(b, schema)
                                                                                              : add_gemma_arguments(b, schema)));
        for (const Elem& e : b.literal(spec.closing)) seq.push_back(e);
        b.add_alt(root, seq);
      }
      break;
    }
  }
  return b.finish(root);
}

std::shared_ptr<const Constraint> compile_constraint(const ConstraintSpec& spec, std::shared_ptr<const TokenTable> tokens) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::shared_ptr<const Grammar>> cache;
  const std::string key = spec.cache_key();
  auto c = std::make_shared<Constraint>();
  c->tokens = std::move(tokens);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = cache.find(key); it != cache.end()) {
      c->grammar = it->second;
      c->cached = true;
      return c;
    }
  }
  c->grammar = std::make_shared<const Grammar>(build_grammar(spec));
  if (key.size() <= kMaxCachedKeyBytes) {
    std::lock_guard<std::mutex> lock(mu);
    if (cache.size() >= kMaxCachedGrammars) cache.clear();
    cache.emplace(key, c->grammar);
  }
  return c;
}

}  // namespace spark::constrain
