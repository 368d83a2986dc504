// constraint.h — the entry point of structured outputs: a request's constraint (JSON
// Schema, any JSON object, regex, choice, or a tool call's shape) compiled to a grammar
// once, cached by its text, and paired with the vocabulary's token table. The engine
// gives each constrained sequence its own Matcher.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/constrain/grammar.h"
#include "engine/constrain/matcher.h"
#include "engine/constrain/token_table.h"

namespace spark::constrain {

struct ConstraintSpec {
  enum class Kind { JSON_SCHEMA, JSON_OBJECT, REGEX, CHOICE, TOOL_CALL, XML_TOOL_CALL, GEMMA_TOOL_CALL };
  Kind kind = Kind::JSON_OBJECT;
  std::string schema;  // JSON_SCHEMA: the schema as JSON text
  bool strict = false; // JSON_SCHEMA: OpenAI strict mode (every property required)
  std::string regex;   // REGEX
  std::vector<std::string> choices;  // CHOICE: the output is exactly one of these
  // TOOL_CALL: one alternative per function, (literal opening, parameters schema as JSON
  // text); then the literal closing all share. XML_TOOL_CALL: the same, with the arguments
  // as Qwen3-Coder's XML parameters (xml_parameters.h) instead of a JSON object;
  // GEMMA_TOOL_CALL: as Gemma 4's argument notation (gemma_arguments.h).
  std::vector<std::pair<std::string, std::string>> tools;
  std::string closing;

  std::string cache_key() const;
};

struct ToolTrigger;

struct Constraint {
  std::shared_ptr<const Grammar> grammar;  // null when `trigger` is set
  std::shared_ptr<const TokenTable> tokens;
  // tool_choice "auto": the output has no grammar of its own; each tool call the model
  // opens is constrained from its opening to its end (tool_trigger.h).
  std::shared_ptr<const ToolTrigger> trigger;
  bool cached = false;  // every grammar it needed came from the cache (the cache-hit metric)

  std::unique_ptr<Matcher> new_matcher() const { return std::make_unique<Matcher>(grammar, tokens); }
};

// Compiles (or finds in the cache) the grammar of `spec`. Throws InputError naming what is
// unsupported or which limit was hit. Thread-safe.
std::shared_ptr<const Constraint> compile_constraint(const ConstraintSpec& spec, std::shared_ptr<const TokenTable> tokens);

// The grammar alone, uncached (tests and benchmarks).
Grammar build_grammar(const ConstraintSpec& spec);

}  // namespace spark::constrain
