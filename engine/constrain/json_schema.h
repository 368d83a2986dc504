// json_schema.h — JSON Schema to grammar rules. The output is compact JSON (no whitespace
// between tokens), properties in the order the schema declares them, numbers in JSON's
// own syntax. Keywords the compiler cannot enforce are refused (InputError naming the
// keyword), never dropped; annotations (title, description, default, ...) are ignored.
//
// Policies (documented in the README):
// - additionalProperties absent: only the declared properties are generated (every output
//   still validates, since the spec's default allows extra ones); true or a schema: more
//   properties with any name may follow the declared ones.
// - oneOf is generated as anyOf (exclusivity is not enforced).
// - strict (OpenAI's structured-output mode): every property is required.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/constrain/grammar.h"

namespace spark::constrain {

// Limits that keep hostile schemas bounded (beyond the grammar's own size limits).
inline constexpr int kMaxSchemaDepth = 128;  // nesting of schemas inside schemas

// A notation other than JSON that writes JSON's values (Gemma 4's tool-call arguments,
// gemma_arguments.h): the schema is walked as for JSON, and what differs is asked here.
class ValueNotation {
 public:
  virtual ~ValueNotation() = default;
  // A value written whole (const, enum, uniqueItems' choices).
  virtual std::string literal(const nlohmann::ordered_json& value) const = 0;
  // A member's key with what separates it from the value ("\"key\":" in JSON).
  virtual std::string key(const std::string& name) const = 0;
  // An object's properties in the order they are written (JSON: the schema's).
  virtual void order(std::vector<std::pair<std::string, const nlohmann::ordered_json*>>& props) const {}
  // A value of type string without const or enum; `where` names it in refusals.
  virtual uint32_t string(GrammarBuilder& b, const nlohmann::ordered_json& schema, const std::string& where) const = 0;
  // Any value, and any member key with its separator (additionalProperties).
  virtual uint32_t any_value(GrammarBuilder& b) const = 0;
  virtual uint32_t any_key(GrammarBuilder& b) const = 0;
};

struct JsonSchemaOptions {
  bool strict = false;
  const ValueNotation* notation = nullptr;  // null: JSON
};

// Adds the rules for `schema` to `b`; returns the rule matching exactly its instances.
// Property order is the schema's own, so it is read as an ordered_json.
uint32_t add_json_schema(GrammarBuilder& b, const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});
// Any JSON value / any JSON object (response_format json_object).
uint32_t add_any_json_value(GrammarBuilder& b);
uint32_t add_any_json_object(GrammarBuilder& b);

}  // namespace spark::constrain
