// xml_parameters.cpp — Qwen3-Coder's XML tool-call arguments as grammar rules.
#include "engine/constrain/xml_parameters.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <vector>

#include "engine/constrain/intersection.h"
#include "engine/constrain/json_schema.h"
#include "engine/constrain/regex.h"
#include "engine/constrain/string_formats.h"
#include "engine/util/check.h"

namespace spark::constrain {
namespace {

using J = nlohmann::ordered_json;
constexpr std::string_view kParameterClose = "</parameter>";

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw InputError("tool call: parameter '" + key + "': " + why);
}

int64_t length_bound(const J& s, const char* name, const std::string& key) {
  if (!s[name].is_number_integer() || s[name].get<int64_t>() < 0 || s[name].get<int64_t>() > kMaxRepeat)
    refuse(key, std::string("'") + name + "' must be an integer from 0 to " + std::to_string(kMaxRepeat));
  return s[name].get<int64_t>();
}

// A string's bare value: its enum or const as written, else bare text under its format,
// pattern and lengths (characters, as JSON Schema counts them).
uint32_t string_value(GrammarBuilder& b, const J& s, const std::string& key) {
  if (s.contains("enum") || s.contains("const")) {
    const J values = s.contains("enum") ? s["enum"] : J::array({s["const"]});
    if (!values.is_array() || values.empty()) refuse(key, "'enum' must be a non-empty array");
    const uint32_t rule = b.new_rule();
    for (const J& v : values) {
      if (v.is_null()) {
        b.add_alt(rule, b.literal("null"));
        continue;
      }
      if (!v.is_string()) refuse(key, "a string's enum holds " + v.dump() + ", which bare text cannot tell from a string");
      const std::string text = v.get<std::string>();
      if (text.find(kParameterClose) != std::string::npos) refuse(key, "an enum value holds </parameter>");
      b.add_alt(rule, b.literal(text));
    }
    return rule;
  }
  return add_bare_text(b, s, kParameterClose, key);
}

}  // namespace

uint32_t add_bare_text(GrammarBuilder& b, const J& s, std::string_view never, const std::string& key) {
  const bool any_format = s.contains("format") && (s["format"] == "password" || s["format"] == "binary");
  const bool format = s.contains("format") && !any_format, pattern = s.contains("pattern");
  if ((format && !s["format"].is_string()) || (pattern && !s["pattern"].is_string()))
    refuse(key, "'format' and 'pattern' must be strings");
  uint32_t inside = format && pattern ? add_string_format_and_pattern(b, s["format"].get<std::string>(), s["pattern"].get<std::string>(), RegexContext::TEXT)
                    : format          ? add_string_format(b, s["format"].get<std::string>(), RegexContext::TEXT)
                    : pattern         ? add_string_pattern(b, s["pattern"].get<std::string>(), RegexContext::TEXT)
                                      : b.star(add_text_char(b));
  if (s.contains("minLength") || s.contains("maxLength")) {
    const int64_t min = s.contains("minLength") ? length_bound(s, "minLength", key) : 0;
    const int64_t max = s.contains("maxLength") ? length_bound(s, "maxLength", key) : -1;
    if (max >= 0 && max < min) refuse(key, "'maxLength' is below 'minLength'");
    const uint32_t counted = b.repeat(add_text_char(b), min, max);
    inside = format || pattern ? add_intersection(b, inside, counted, Combine::BOTH, "parameter '" + key + "'", false) : counted;
  }
  // Never the tag that ends the value (the reader ends it at the first one).
  const Elem any = GrammarBuilder::call(b.star(add_text_char(b)));
  std::vector<Elem> containing{any};
  for (const Elem& e : b.literal(never)) containing.push_back(e);
  containing.push_back(any);
  return add_intersection(b, inside, b.rule_of({containing}), Combine::FIRST_NOT_SECOND, "parameter '" + key + "'", false);
}

namespace {

}  // namespace

void bound_numbers(J& s) {
  if (s.is_array()) {
    for (J& item : s) bound_numbers(item);
    return;
  }
  if (!s.is_object()) return;
  auto numeric = [](const J& t) { return t.is_string() && (t == "number" || t == "integer"); };
  const bool typed = s.contains("type") && (numeric(s["type"]) || (s["type"].is_array() && std::any_of(s["type"].begin(), s["type"].end(), numeric)));
  if (typed) {
    if (!s.contains("minimum") && !s.contains("exclusiveMinimum")) s["minimum"] = -1e15;
    if (!s.contains("maximum") && !s.contains("exclusiveMaximum")) s["maximum"] = 1e15;
  }
  for (auto& [key, value] : s.items()) bound_numbers(value);
}

namespace {

// A parameter's value, typed as the reader types it back.
uint32_t value_rule(GrammarBuilder& b, const J& s, const J& root, const std::string& key) {
  bool nullable = false;
  const std::string type = xml_value_type(s, nullable);
  if (type == "null") return b.literal_rule("null");
  if (type.empty() || type == "string") {
    // A string's constraints stand in its own branch of an anyOf / oneOf.
    const uint32_t rule = b.new_rule();
    bool branches = false;
    for (const char* k : {"anyOf", "oneOf"})
      if (s.is_object() && s.contains(k) && s[k].is_array())
        for (const J& branch : s[k]) {
          bool n = false;
          const std::string t = xml_value_type(branch, n);
          if (t == "string") b.add_alt(rule, {GrammarBuilder::call(string_value(b, branch, key))}), branches = true;
        }
    if (!branches) b.add_alt(rule, {GrammarBuilder::call(string_value(b, s.is_object() ? s : J::object(), key))});
    if (nullable) b.add_alt(rule, b.literal("null"));
    return rule;
  }
  // Any other type is read as JSON: its schema without the string branches the reader
  // would never give back (with the root's definitions, for its $refs).
  J json = s;
  if (json.contains("type") && json["type"].is_array()) {
    J types = J::array();
    for (const J& t : json["type"])
      if (t != "string") types.push_back(t);
    json["type"] = types;
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (json.contains(k) && json[k].is_array()) {
      J kept = J::array();
      for (const J& branch : json[k]) {
        bool n = false;
        if (xml_value_type(branch, n) != "string") kept.push_back(branch);
      }
      json[k] = kept;
    }
  for (const char* k : {"$defs", "definitions"})
    if (root.contains(k) && !json.contains(k)) json[k] = root[k];
  bound_numbers(json);
  return add_json_schema(b, json);
}

}  // namespace

std::string xml_value_type(const J& schema, bool& nullable) {
  nullable = false;
  std::string first;
  auto consider = [&](const J& type) {
    if (!type.is_string()) return;
    const std::string t = type.get<std::string>();
    if (t == "null") nullable = true;
    else if (first.empty()) first = t;
  };
  auto types_of = [&](const J& s) {
    if (!s.is_object() || !s.contains("type")) return;
    if (s["type"].is_array())
      for (const auto& t : s["type"]) consider(t);
    else
      consider(s["type"]);
  };
  types_of(schema);
  for (const char* key : {"anyOf", "oneOf"})
    if (schema.is_object() && schema.contains(key) && schema[key].is_array())
      for (const auto& branch : schema[key]) types_of(branch);
  return first.empty() && nullable ? "null" : first;
}

uint32_t add_xml_parameters(GrammarBuilder& b, const J& parameters) {
  if (!parameters.is_object()) throw InputError("tool call: a function's parameters must be a JSON object schema");
  const J props = parameters.contains("properties") ? parameters["properties"] : J::object();
  if (!props.is_object()) throw InputError("tool call: 'properties' must be an object");
  std::set<std::string> required;
  if (parameters.contains("required") && parameters["required"].is_array())
    for (const J& r : parameters["required"])
      if (r.is_string()) required.insert(r.get<std::string>());
  // <parameter=KEY>\nVALUE\n</parameter>\n, the value's rule made once the key is known to fit.
  auto block = [&](const std::string& key, const auto& value) {
    if (key.empty() || key.find_first_of(">\n") != std::string::npos)
      refuse(key, "Qwen3-Coder's XML cannot write a parameter name that is empty or holds '>' or a newline");
    std::vector<Elem> seq = b.literal("<parameter=" + key + ">\n");
    seq.push_back(GrammarBuilder::call(value()));
    for (const Elem& e : b.literal("\n</parameter>\n")) seq.push_back(e);
    return b.rule_of({seq});
  };
  std::vector<Elem> seq;
  for (const auto& [key, schema] : props.items()) {
    const uint32_t rule = block(key, [&] { return value_rule(b, schema, parameters, key); });
    seq.push_back(GrammarBuilder::call(required.count(key) ? rule : b.optional(rule)));
    required.erase(key);
  }
  // Required names without a schema of their own: bare text, after the declared ones.
  for (const std::string& key : required)
    seq.push_back(GrammarBuilder::call(block(key, [&] { return string_value(b, J::object(), key); })));
  return b.rule_of({seq});
}

}  // namespace spark::constrain
