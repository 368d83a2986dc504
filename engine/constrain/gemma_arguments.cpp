// gemma_arguments.cpp — Gemma 4's tool-call argument notation, as a ValueNotation of the JSON
// Schema compiler.
#include "engine/constrain/gemma_arguments.h"

#include <algorithm>
#include <string>

#include "engine/constrain/json_schema.h"
#include "engine/constrain/number_range.h"
#include "engine/constrain/xml_parameters.h"
#include "engine/util/check.h"

namespace spark::constrain {
namespace {

using J = nlohmann::ordered_json;

std::string lower(std::string s) {
  for (char& c : s) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// A key the reader takes bare, as the template writes keys: up to the first ':', trimmed,
// none of {}[], or a newline, and not opening as a string would.
bool bare_key(const std::string& key) {
  return !key.empty() && key.find_first_of("{}[],:\n") == std::string::npos && !is_space(key.front()) &&
         !is_space(key.back()) && key.front() != '"' && !key.starts_with(kGemmaQuote);
}

class GemmaNotation : public ValueNotation {
 public:
  std::string literal(const J& v) const override {
    if (v.is_string()) {
      const std::string text = v.get<std::string>();
      if (text.find(kGemmaQuote) != std::string::npos)
        throw InputError("tool call: the value '" + text + "' holds <|\"|>, which Gemma 4's strings cannot hold");
      return std::string(kGemmaQuote) + text + std::string(kGemmaQuote);
    }
    if (v.is_object()) {
      std::vector<std::pair<std::string, const J*>> members;
      for (const auto& [k, value] : v.items()) members.emplace_back(k, &value);
      order(members);
      std::string out = "{";
      for (const auto& [k, value] : members) out += (out.size() > 1 ? "," : "") + key(k) + literal(*value);
      return out + "}";
    }
    if (v.is_array()) {
      std::string out = "[";
      for (const J& item : v) out += (out.size() > 1 ? "," : "") + literal(item);
      return out + "]";
    }
    return v.dump(-1, ' ', false, J::error_handler_t::strict);
  }

  std::string key(const std::string& name) const override {
    if (bare_key(name)) return name + ":";
    // The reader takes a key between the string delimiters too.
    if (name.find(kGemmaQuote) != std::string::npos)
      throw InputError("tool call: the property name '" + name + "' holds <|\"|>, which Gemma 4 cannot write");
    return std::string(kGemmaQuote) + name + std::string(kGemmaQuote) + ":";
  }

  // Jinja's dictsort: by key, case-insensitively, equal keys in their order.
  void order(std::vector<std::pair<std::string, const J*>>& props) const override {
    std::stable_sort(props.begin(), props.end(), [](const auto& a, const auto& b) { return lower(a.first) < lower(b.first); });
  }

  uint32_t string(GrammarBuilder& b, const J& schema, const std::string& where) const override {
    std::vector<Elem> seq = b.literal(kGemmaQuote);
    seq.push_back(GrammarBuilder::call(add_bare_text(b, schema, kGemmaQuote, where)));
    for (const Elem& e : b.literal(kGemmaQuote)) seq.push_back(e);
    return b.rule_of({seq});
  }

  uint32_t any_value(GrammarBuilder& b) const override {
    const uint32_t value = b.new_rule();
    const uint32_t comma = b.rule_of({{b.byte(',')}});
    const uint32_t member = b.rule_of({{GrammarBuilder::call(any_key(b)), GrammarBuilder::call(value)}});
    const uint32_t members = b.repeat(member, 0, -1, comma);
    const uint32_t items = b.repeat(value, 0, -1, comma);
    b.add_alt(value, {b.byte('{'), GrammarBuilder::call(members), b.byte('}')});
    b.add_alt(value, {b.byte('['), GrammarBuilder::call(items), b.byte(']')});
    b.add_alt(value, {GrammarBuilder::call(string(b, J::object(), "(any)"))});
    NumberBounds readable;  // as bound_numbers gives the schema's numbers
    readable.minimum = -1e15, readable.maximum = 1e15;
    b.add_alt(value, {GrammarBuilder::call(add_number(b, false, readable))});
    for (const char* word : {"true", "false", "null"}) b.add_alt(value, b.literal(word));
    return value;
  }

  // An identifier, as the model writes keys: [A-Za-z_][A-Za-z0-9_.-]*, then ':'.
  uint32_t any_key(GrammarBuilder& b) const override {
    ByteSet first, rest;
    first.add_range('a', 'z'), first.add_range('A', 'Z'), first.add('_');
    rest = first;
    rest.add_range('0', '9'), rest.add('.'), rest.add('-');
    const uint32_t more = b.star(b.rule_of({{b.bytes(rest)}}));
    return b.rule_of({{b.bytes(first), GrammarBuilder::call(more), b.byte(':')}});
  }
};

}  // namespace

uint32_t add_gemma_arguments(GrammarBuilder& b, const J& parameters) {
  if (!parameters.is_object()) throw InputError("tool call: a function's parameters must be a JSON object schema");
  static const GemmaNotation notation;
  // The arguments are an object whatever the schema says of their type.
  J schema = parameters;
  if (!schema.contains("type") && !schema.contains("$ref") && !schema.contains("anyOf") && !schema.contains("oneOf") &&
      !schema.contains("allOf"))
    schema["type"] = "object";
  bound_numbers(schema);  // the reader types a bare number only when a double holds it
  b.add_marker(kGemmaQuote);  // the real tokenizer's own token, which the model writes
  return add_json_schema(b, schema, {false, &notation});
}

}  // namespace spark::constrain
