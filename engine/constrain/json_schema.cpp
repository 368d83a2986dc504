// json_schema.cpp — the JSON Schema compiler (see json_schema.h for the policies).
#include "engine/constrain/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/constrain/min_length.h"
#include "engine/constrain/number_range.h"
#include "engine/constrain/string_formats.h"
#include "engine/util/check.h"

namespace spark::constrain {
namespace {

using J = nlohmann::ordered_json;

const std::set<std::string> kAnnotations = {
    "title",    "description", "default",  "examples",         "$schema",         "$id",    "$comment",
    "deprecated", "readOnly",  "writeOnly", "contentMediaType", "contentEncoding", "$defs", "definitions",
    "discriminator", "strict", "name", "contentSchema"};
const std::set<std::string> kHandled = {
    "type",     "properties", "required",  "additionalProperties", "enum",      "const",     "anyOf",
    "oneOf",    "allOf",      "$ref",      "items",                "prefixItems", "minItems", "maxItems",
    "minLength", "maxLength", "pattern",   "format",               "minimum",   "maximum",   "exclusiveMinimum",
    "exclusiveMaximum", "nullable", "additionalItems", "multipleOf", "uniqueItems"};

[[noreturn]] void refuse(const std::string& what) { throw InputError("JSON schema: " + what); }

std::string dump(const J& v) { return v.dump(-1, ' ', false, J::error_handler_t::strict); }

class Compiler {
 public:
  Compiler(GrammarBuilder& b, const J& root, const JsonSchemaOptions& o)
      : b_(b), root_(root), options_(o), notation_(o.notation) {}

  uint32_t compile(const J& s, int depth) {
    if (depth > kMaxSchemaDepth) refuse("nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse("the schema 'false' matches nothing");
      return any_value();
    }
    if (!s.is_object()) refuse("a schema must be an object or a boolean, got " + std::string(s.type_name()));
    for (const auto& [key, value] : s.items())
      if (!kHandled.count(key) && !kAnnotations.count(key)) refuse("unsupported keyword '" + key + "'");

    if (s.contains("$ref")) return compile_ref(s, depth);
    if (s.contains("allOf")) return compile(merge_all_of(s), depth + 1);
    for (const char* key : {"anyOf", "oneOf"})
      if (s.contains(key)) return compile_any_of(s, key, depth);
    if (s.contains("const")) return b_.literal_rule(literal(s["const"]));
    if (s.contains("enum")) {
      const J& e = s["enum"];
      if (!e.is_array() || e.empty()) refuse("'enum' must be a non-empty array");
      uint32_t r = b_.new_rule();
      for (const auto& v : e) b_.add_alt(r, b_.literal(literal(v)));
      return r;
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const J& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const auto& x : t) {
          if (!x.is_string()) refuse("'type' entries must be strings");
          types.push_back(x.get<std::string>());
        }
      else refuse("'type' must be a string or an array of strings");
    } else {
      types = implied_types(s);
    }
    if (s.value("nullable", false)) types.push_back("null");
    if (types.empty()) return any_value();
    uint32_t r = b_.new_rule();
    for (const auto& t : types) b_.add_alt(r, {GrammarBuilder::call(compile_type(s, t, depth))});
    return r;
  }

 private:
  static std::vector<std::string> implied_types(const J& s) {
    for (const char* k : {"properties", "required", "additionalProperties"})
      if (s.contains(k)) return {"object"};
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems", "additionalItems", "uniqueItems"})
      if (s.contains(k)) return {"array"};
    for (const char* k : {"minLength", "maxLength", "pattern", "format"})
      if (s.contains(k)) return {"string"};
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
      if (s.contains(k)) return {"number"};
    return {};
  }

  uint32_t compile_type(const J& s, const std::string& type, int depth) {
    if (type == "null") return b_.literal_rule("null");
    if (type == "boolean") return b_.rule_of({b_.literal("true"), b_.literal("false")});
    if (type == "integer" || type == "number") return compile_number(s, type == "integer");
    if (type == "string") return notation_ ? notation_->string(b_, s, where()) : compile_string(s);
    if (type == "object") return compile_object(s, depth);
    if (type == "array") {
      if (s.contains("items") && s["items"].is_array()) {  // draft 4-7 tuples (zod writes them): prefixItems
        if (s.contains("prefixItems")) refuse("'items' as an array together with 'prefixItems'");
        J tuple = s;
        tuple["prefixItems"] = s["items"];
        tuple.erase("items");
        if (s.contains("additionalItems")) tuple["items"] = s["additionalItems"];
        tuple.erase("additionalItems");
        return compile_array(tuple, depth);
      }
      if (s.contains("additionalItems")) refuse("'additionalItems' without an array of 'items'");
      return compile_array(s, depth);
    }
    refuse("unknown type '" + type + "'");
  }

  uint32_t compile_number(const J& s, bool integer) {
    NumberBounds bounds;
    auto read = [&](const char* key, std::optional<double>& out) {
      if (!s.contains(key)) return;
      if (!s[key].is_number()) refuse("'" + std::string(key) + "' must be a number");
      out = s[key].get<double>();
    };
    read("minimum", bounds.minimum);
    read("maximum", bounds.maximum);
    read("exclusiveMinimum", bounds.exclusive_minimum);
    read("exclusiveMaximum", bounds.exclusive_maximum);
    if (s.contains("multipleOf")) {
      if (!s["multipleOf"].is_number()) refuse("'multipleOf' must be a number");
      return add_multiple_of(b_, integer, bounds, s["multipleOf"].get<double>());
    }
    return add_number(b_, integer, bounds);
  }

  uint32_t compile_string(const J& s) {
    const int64_t min = s.contains("minLength") ? count(s, "minLength") : 0;
    const int64_t max = s.contains("maxLength") ? count(s, "maxLength") : -1;
    const Elem quote = b_.byte('"');
    if (max >= 0 && max < min) refuse_here("'maxLength' " + std::to_string(max) + " is below 'minLength' " + std::to_string(min));
    if (max > kMaxRepeat || min > kMaxRepeat)
      refuse_here("'maxLength' / 'minLength' above " + std::to_string(kMaxRepeat) + " is not supported");
    // Pydantic's secrets and bytes: any string.
    const bool any_format = s.contains("format") && (s["format"] == "password" || s["format"] == "binary");
    if ((!s.contains("format") || any_format) && !s.contains("pattern")) {
      if (min == 0 && max < 0) return b_.rule_of({{quote, GrammarBuilder::string_body(), quote}});
      return b_.rule_of({{quote, b_.string_body(uint32_t(min), max < 0 ? UINT32_MAX : uint32_t(max)), quote}});
    }
    const bool format = s.contains("format") && !any_format, pattern = s.contains("pattern");
    if (format && !s["format"].is_string()) refuse_here("'format' must be a string");
    if (pattern && !s["pattern"].is_string()) refuse_here("'pattern' must be a string");
    std::string what;
    uint32_t inside;
    if (format && pattern) {
      what = "format '" + s["format"].get<std::string>() + "' with its pattern";
      inside = add_string_format_and_pattern(b_, s["format"].get<std::string>(), s["pattern"].get<std::string>());
    } else if (format) {
      what = "format '" + s["format"].get<std::string>() + "'";
      inside = add_string_format(b_, s["format"].get<std::string>());
    } else {
      what = "pattern '" + s["pattern"].get<std::string>() + "'";
      inside = add_string_pattern(b_, s["pattern"].get<std::string>());
    }
    if (min == 0 && max < 0) return b_.rule_of({{quote, GrammarBuilder::call(inside), quote}});
    // Lengths with a format or pattern: the strings of both, counted in a region of the
    // grammar; none where every string of the format already fits (uuid, date).
    const auto [fewest, most] = b_.chars_of(inside);
    if (max >= 0 && fewest > max)
      refuse_here("'maxLength' " + std::to_string(max) + " is below the " + std::to_string(fewest) + " characters " + what + " needs at least");
    if (most != kUnboundedChars && most < min)
      refuse_here("'minLength' " + std::to_string(min) + " is above the " + std::to_string(most) + " characters " + what + " allows at most");
    if (fewest >= min && (max < 0 || (most != kUnboundedChars && most <= max)))
      return b_.rule_of({{quote, GrammarBuilder::call(inside), quote}});
    return b_.rule_of({{quote, b_.counted(inside, uint32_t(min), max < 0 ? UINT32_MAX : uint32_t(max)), quote}});
  }

  // The property path, dotted ("" at the root).
  std::string where() const {
    std::string at;
    for (const auto& p : path_) at += (at.empty() ? "" : ".") + p;
    return at;
  }

  // A refusal that names where in the schema it arose (the property path).
  [[noreturn]] void refuse_here(const std::string& what) {
    const std::string at = where();
    refuse(at.empty() ? what : "property '" + at + "': " + what);
  }

  std::string literal(const J& v) const { return notation_ ? notation_->literal(v) : dump(v); }
  uint32_t any_value() { return notation_ ? notation_->any_value(b_) : add_any_json_value(b_); }

  uint32_t compile_object(const J& s, int depth) {
    std::vector<std::pair<std::string, const J*>> props;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) refuse("'properties' must be an object");
      for (const auto& [k, v] : s["properties"].items()) props.emplace_back(k, &v);
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse("'required' must be an array of names");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) refuse("'required' must be an array of names");
        required.insert(r.get<std::string>());
      }
    }
    for (const auto& name : required) {
      bool declared = false;
      for (const auto& p : props) declared = declared || p.first == name;
      if (!declared) {
        // A required name without a schema of its own: its value follows additionalProperties.
        const J* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
        if (extra && extra->is_boolean() && !extra->get<bool>())
          refuse("property '" + name + "' is required but additionalProperties is false");
        props.emplace_back(name, extra);
      }
    }
    // Extra properties after the declared ones: only when additionalProperties says so.
    std::optional<uint32_t> extra_value;
    if (s.contains("additionalProperties")) {
      const J& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) extra_value = a.is_boolean() ? any_value() : compile(a, depth + 1);
    }
    if (notation_) notation_->order(props);

    const size_t n = props.size();
    std::vector<uint32_t> member(n);
    for (size_t i = 0; i < n; ++i) {
      path_.push_back(props[i].first);
      uint32_t value = props[i].second ? compile(*props[i].second, depth + 1) : any_value();
      path_.pop_back();
      std::vector<Elem> seq = b_.literal(notation_ ? notation_->key(props[i].first) : dump(J(props[i].first)) + ":");
      seq.push_back(GrammarBuilder::call(value));
      member[i] = b_.rule_of({seq});
    }
    const Elem comma = b_.byte(',');
    // first[i]: members i.. when none was written yet; after[i]: when one was (comma first).
    uint32_t first_tail = b_.empty_rule(), after_tail = b_.empty_rule();
    if (extra_value) {
      const std::vector<Elem> kv =
          notation_ ? std::vector<Elem>{GrammarBuilder::call(notation_->any_key(b_)), GrammarBuilder::call(*extra_value)}
                    : std::vector<Elem>{b_.byte('"'), GrammarBuilder::string_body(), b_.byte('"'), b_.byte(':'),
                                        GrammarBuilder::call(*extra_value)};
      const uint32_t extra_member = b_.rule_of({kv});
      first_tail = b_.repeat(extra_member, 0, -1, b_.rule_of({{comma}}));
      after_tail = b_.star(b_.rule_of({{comma, GrammarBuilder::call(extra_member)}}));
    }
    for (size_t i = n; i-- > 0;) {
      const bool optional = !options_.strict && !required.count(props[i].first);
      const uint32_t after = b_.rule_of({{comma, GrammarBuilder::call(member[i]), GrammarBuilder::call(after_tail)}});
      const uint32_t first = b_.rule_of({{GrammarBuilder::call(member[i]), GrammarBuilder::call(after_tail)}});
      if (optional) {
        b_.add_alt(after, {GrammarBuilder::call(after_tail)});
        b_.add_alt(first, {GrammarBuilder::call(first_tail)});
      }
      after_tail = after;
      first_tail = first;
    }
    return b_.rule_of({{b_.byte('{'), GrammarBuilder::call(first_tail), b_.byte('}')}});
  }

  uint32_t compile_array(const J& s, int depth) {
    const int64_t min = s.contains("minItems") ? count(s, "minItems") : 0;
    const int64_t max = s.contains("maxItems") ? count(s, "maxItems") : -1;
    if (max > kMaxRepeat || min > kMaxRepeat)
      refuse("'maxItems' / 'minItems' above " + std::to_string(kMaxRepeat) + " is not supported");
    if (s.contains("uniqueItems")) {
      if (!s["uniqueItems"].is_boolean()) refuse("'uniqueItems' must be true or false");
      if (s["uniqueItems"].get<bool>()) return compile_unique_array(s, min, max);
    }
    std::vector<uint32_t> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) refuse("'prefixItems' must be an array of schemas");
      for (const auto& p : s["prefixItems"]) prefix.push_back(compile(p, depth + 1));
    }
    std::optional<uint32_t> item;
    if (!s.contains("items") || !(s["items"].is_boolean() && !s["items"].get<bool>()))
      item = s.contains("items") ? compile(s["items"], depth + 1) : any_value();
    const uint32_t comma = b_.rule_of({{b_.byte(',')}});
    const int64_t k = int64_t(prefix.size());
    uint32_t body;
    if (k == 0) {
      body = item ? b_.repeat(*item, min, max, comma) : b_.empty_rule();
      if (!item && min > 0) refuse("'minItems' needs items");
    } else {
      if (max >= 0 && max < k) prefix.resize(size_t(max));
      // After the prefix: more items, each with its comma.
      uint32_t rest = b_.empty_rule();
      if (item && (max < 0 || max > k)) {
        const uint32_t next = b_.rule_of({{GrammarBuilder::call(comma), GrammarBuilder::call(*item)}});
        rest = b_.repeat(next, std::max<int64_t>(0, min - k), max < 0 ? -1 : max - k);
      } else if (min > k) {
        refuse("'minItems' exceeds the items 'prefixItems' and 'items' allow");
      }
      body = rest;
      for (int64_t i = int64_t(prefix.size()); i-- > 0;) {
        std::vector<Elem> seq;
        if (i > 0) seq.push_back(GrammarBuilder::call(comma));
        seq.push_back(GrammarBuilder::call(prefix[size_t(i)]));
        seq.push_back(GrammarBuilder::call(body));
        body = i + 1 > min ? b_.rule_of({seq, {}}) : b_.rule_of({seq});
      }
    }
    return b_.rule_of({{b_.byte('['), GrammarBuilder::call(body), b_.byte(']')}});
  }

  // uniqueItems (pydantic's set[...] of an enum or literals): the items are drawn from a
  // finite set of at most kMaxUniqueChoices values, each at most once. One rule per subset
  // of values written so far, so the grammar holds 2^n rules, not n! orders. Items that are
  // not such a set cannot be kept distinct by a grammar and are refused.
  static constexpr size_t kMaxUniqueChoices = 8;
  uint32_t compile_unique_array(const J& s, int64_t min, int64_t max) {
    if (s.contains("prefixItems") || (s.contains("items") && s["items"].is_array()))
      refuse_here("'uniqueItems' together with tuple items is not supported");
    std::vector<std::string> values;  // the distinct items, as written
    if (s.contains("items")) {
      const J* items = &s["items"];
      for (int hops = 0; items->is_object() && items->contains("$ref"); ++hops) {
        if (hops > kMaxSchemaDepth) refuse("'$ref' cycles with no base case");
        items = &resolve((*items)["$ref"]);
      }
      if (items->is_object() && items->contains("enum") && (*items)["enum"].is_array())
        for (const auto& v : (*items)["enum"]) values.push_back(literal(v));
      else if (items->is_object() && items->contains("const"))
        values.push_back(literal((*items)["const"]));
      else if (items->is_object() && items->value("type", J()) == "boolean")
        values = {"true", "false"};
    }
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    if (values.empty() || values.size() > kMaxUniqueChoices)
      refuse_here("'uniqueItems' is supported for items drawn from an enum, a const or booleans of at most " +
                  std::to_string(kMaxUniqueChoices) + " values (a grammar cannot keep other items distinct)");
    const size_t n = values.size();
    if (int64_t(n) < min) refuse_here("'minItems' " + std::to_string(min) + " exceeds the " + std::to_string(n) + " distinct items");
    const int64_t most = max < 0 ? int64_t(n) : std::min<int64_t>(max, int64_t(n));
    // after[S]: what may follow once the values in S are written (S non-empty): "]" when
    // enough are, or "," and one more of the others while fewer than `most` are.
    std::vector<uint32_t> after(size_t(1) << n);
    for (auto& r : after) r = b_.new_rule();
    for (uint32_t set = 1; set < after.size(); ++set) {
      const auto written = int64_t(__builtin_popcount(set));
      if (written >= min) b_.add_alt(after[set], {b_.byte(']')});
      if (written < most)
        for (size_t v = 0; v < n; ++v)
          if (!(set & (1u << v))) {
            std::vector<Elem> seq = {b_.byte(',')};
            for (const Elem& e : b_.literal(values[v])) seq.push_back(e);
            seq.push_back(GrammarBuilder::call(after[set | (1u << v)]));
            b_.add_alt(after[set], seq);
          }
    }
    const uint32_t r = b_.new_rule();
    if (min == 0) b_.add_alt(r, b_.literal("[]"));
    if (most > 0)
      for (size_t v = 0; v < n; ++v) {
        std::vector<Elem> seq = {b_.byte('[')};
        for (const Elem& e : b_.literal(values[v])) seq.push_back(e);
        seq.push_back(GrammarBuilder::call(after[size_t(1) << v]));
        b_.add_alt(r, seq);
      }
    return r;
  }

  uint32_t compile_any_of(const J& s, const char* key, int depth) {
    const J& branches = s[key];
    if (!branches.is_array() || branches.empty()) refuse("'" + std::string(key) + "' must be a non-empty array");
    for (const auto& [k, v] : s.items())
      if (k != key && kHandled.count(k) && k != "type" && k != "nullable")
        refuse("'" + std::string(key) + "' together with '" + k + "' is not supported");
    uint32_t r = b_.new_rule();
    for (const auto& branch : branches) b_.add_alt(r, {GrammarBuilder::call(compile(branch, depth + 1))});
    if (s.value("nullable", false)) b_.add_alt(r, b_.literal("null"));
    return r;
  }

  // allOf of object-like schemas: properties and required are united; any other keyword
  // given twice must agree.
  J merge_all_of(const J& s) {
    if (!s["allOf"].is_array() || s["allOf"].empty()) refuse("'allOf' must be a non-empty array");
    J merged = s;
    merged.erase("allOf");
    for (J part : s["allOf"]) {
      if (part.contains("$ref")) part = resolve(part["$ref"]);
      if (!part.is_object()) refuse("'allOf' entries must be schema objects");
      for (const auto& [k, v] : part.items()) {
        if (k == "properties" && merged.contains(k)) merged[k].update(v);
        else if (k == "required" && merged.contains(k))
          for (const auto& r : v) merged[k].push_back(r);
        else if (!merged.contains(k) || kAnnotations.count(k)) merged[k] = v;
        else if (merged[k] != v) refuse("'allOf' with conflicting '" + k + "' is not supported");
      }
    }
    return merged;
  }

  const J& resolve(const J& ref) {
    if (!ref.is_string()) refuse("'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') refuse("only local '$ref' (\"#/...\") is supported, got '" + r + "'");
    try {
      return r == "#" ? root_ : root_.at(J::json_pointer(r.substr(1)));
    } catch (const J::exception&) {
      refuse("'$ref' '" + r + "' does not resolve");
    }
  }

  uint32_t compile_ref(const J& s, int depth) {
    for (const auto& [k, v] : s.items())
      if (k != "$ref" && kHandled.count(k)) refuse("'$ref' together with '" + k + "' is not supported");
    const std::string key = s["$ref"].is_string() ? s["$ref"].get<std::string>() : "";
    if (auto it = refs_.find(key); it != refs_.end()) return it->second;
    const J& target = resolve(s["$ref"]);
    const uint32_t r = b_.new_rule();  // before compiling: recursive references find it
    refs_[key] = r;
    b_.add_alt(r, {GrammarBuilder::call(compile(target, depth + 1))});
    return r;
  }

  static int64_t count(const J& s, const char* key) {
    const J& v = s[key];
    if (!v.is_number_integer() && !(v.is_number() && v.get<double>() == std::floor(v.get<double>())))
      refuse("'" + std::string(key) + "' must be a non-negative integer");
    const double d = v.get<double>();
    if (d < 0) refuse("'" + std::string(key) + "' must be a non-negative integer");
    return d > 1e15 ? int64_t(1e15) : int64_t(d);
  }

  GrammarBuilder& b_;
  const J& root_;
  JsonSchemaOptions options_;
  const ValueNotation* notation_;
  std::map<std::string, uint32_t> refs_;
  std::vector<std::string> path_;
};

}  // namespace

uint32_t add_json_schema(GrammarBuilder& b, const J& schema, const JsonSchemaOptions& options) {
  return Compiler(b, schema, options).compile(schema, 0);
}

uint32_t add_any_json_value(GrammarBuilder& b) {
  // A dozen rules per use: schemas hold few untyped values, so they are not shared.
  const uint32_t value = b.new_rule();
  const Elem quote = b.byte('"'), comma = b.byte(',');
  const uint32_t str = b.rule_of({{quote, GrammarBuilder::string_body(), quote}});
  const uint32_t member = b.rule_of({{GrammarBuilder::call(str), b.byte(':'), GrammarBuilder::call(value)}});
  const uint32_t members = b.repeat(member, 0, -1, b.rule_of({{comma}}));
  const uint32_t object = b.rule_of({{b.byte('{'), GrammarBuilder::call(members), b.byte('}')}});
  const uint32_t items = b.repeat(value, 0, -1, b.rule_of({{comma}}));
  const uint32_t array = b.rule_of({{b.byte('['), GrammarBuilder::call(items), b.byte(']')}});
  for (uint32_t r : {object, array, str, add_number(b, false, {})}) b.add_alt(value, {GrammarBuilder::call(r)});
  for (const char* lit : {"true", "false", "null"}) b.add_alt(value, b.literal(lit));
  return value;
}

uint32_t add_any_json_object(GrammarBuilder& b) {
  const uint32_t value = add_any_json_value(b);
  const Elem quote = b.byte('"');
  const uint32_t member = b.rule_of({{quote, GrammarBuilder::string_body(), quote, b.byte(':'), GrammarBuilder::call(value)}});
  const uint32_t members = b.repeat(member, 0, -1, b.rule_of({{b.byte(',')}}));
  return b.rule_of({{b.byte('{'), GrammarBuilder::call(members), b.byte('}')}});
}

}  // namespace spark::constrain
