// structured_output.cpp — reading the structured-output fields and compiling constraints.
#include "web/structured_output.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/constrain/tool_trigger.h"
#include "engine/core/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"
#include "web/chat_format/chat_format.h"
#include "web/http_error.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;
using Spec = constrain::ConstraintSpec;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw HttpError(400, message, "invalid_request_error", param);
}

// A schema given as an object (or boolean), or as its JSON text (vLLM accepts both).
Spec schema_spec(const J& v, const std::string& param, bool strict = false) {
  Spec s;
  s.kind = Spec::Kind::JSON_SCHEMA;
  s.strict = strict;
  if (v.is_string()) {
    try {
      s.schema = J::parse(v.get<std::string>()).dump();
    } catch (const J::exception&) {
      bad(param, "'" + param + "' must be a JSON schema; its text is not valid JSON");
    }
  } else if (v.is_object() || v.is_boolean()) {
    s.schema = v.dump();
  } else {
    bad(param, "'" + param + "' must be a JSON schema (an object, or its JSON text)");
  }
  return s;
}

Spec regex_spec(const J& v, const std::string& param) {
  if (!v.is_string() || v.get<std::string>().empty()) bad(param, "'" + param + "' must be a non-empty regex string");
  Spec s;
  s.kind = Spec::Kind::REGEX;
  s.regex = v.get<std::string>();
  return s;
}

Spec choice_spec(const J& v, const std::string& param) {
  if (!v.is_array() || v.empty()) bad(param, "'" + param + "' must be a non-empty array of strings");
  Spec s;
  s.kind = Spec::Kind::CHOICE;
  for (const auto& c : v) {
    if (!c.is_string()) bad(param, "'" + param + "' must be a non-empty array of strings");
    s.choices.push_back(c.get<std::string>());
  }
  return s;
}

std::optional<Spec> response_format_spec(const J& v) {
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    bad("response_format", "'response_format' must be an object with a string 'type'");
  const std::string type = v["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return Spec{};
  if (type != "json_schema") bad("response_format", "unknown response_format type '" + type + "'");
  if (!v.contains("json_schema") || !v["json_schema"].is_object())
    bad("response_format", "response_format type 'json_schema' needs a 'json_schema' object");
  const J& js = v["json_schema"];
  bool strict = false;
  if (js.contains("strict") && !js["strict"].is_null()) {
    if (!js["strict"].is_boolean()) bad("response_format", "response_format.json_schema.strict must be true or false");
    strict = js["strict"].get<bool>();
  }
  if (!js.contains("schema") || js["schema"].is_null()) return Spec{};  // any JSON object
  return schema_spec(js["schema"], "response_format", strict);
}

std::shared_ptr<const constrain::TokenTable> token_table(const Tokenizer& tokenizer) {
  static std::mutex mu;
  static std::map<const Tokenizer*, std::shared_ptr<const constrain::TokenTable>> tables;
  std::lock_guard lock(mu);
  auto& table = tables[&tokenizer];
  if (!table) table = constrain::TokenTable::from_tokenizer(tokenizer);
  return table;
}

}  // namespace

std::optional<Spec> parse_structured_output(const J& body, std::string& param) {
  std::vector<std::pair<std::string, std::optional<Spec>>> asked;
  auto get = [&](const char* name) -> const J* {
    auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  if (const J* v = get("response_format")) asked.emplace_back("response_format", response_format_spec(*v));
  if (const J* v = get("guided_json")) asked.emplace_back("guided_json", schema_spec(*v, "guided_json"));
  if (const J* v = get("guided_regex")) asked.emplace_back("guided_regex", regex_spec(*v, "guided_regex"));
  if (const J* v = get("guided_choice")) asked.emplace_back("guided_choice", choice_spec(*v, "guided_choice"));
  if (get("guided_grammar")) bad("guided_grammar", "'guided_grammar' (EBNF grammars) is not supported; use a JSON schema, regex or choice");
  if (const J* v = get("structured_outputs")) {
    if (!v->is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
    for (const auto& [key, value] : v->items()) {
      if (value.is_null()) continue;
      const std::string where = "structured_outputs." + key;
      if (key == "json") asked.emplace_back("structured_outputs", schema_spec(value, where));
      else if (key == "regex") asked.emplace_back("structured_outputs", regex_spec(value, where));
      else if (key == "choice") asked.emplace_back("structured_outputs", choice_spec(value, where));
      else if (key == "json_object") {
        if (!value.is_boolean()) bad("structured_outputs", "'" + where + "' must be true or false");
        if (value.get<bool>()) asked.emplace_back("structured_outputs", Spec{});
      } else if (key == "grammar" || key == "structural_tag") {
        bad("structured_outputs", "'" + where + "' is not supported; use json, regex or choice");
      } else if (key != "disable_any_whitespace" && key != "disable_additional_properties" && key != "whitespace_pattern") {
        bad("structured_outputs", "unknown field '" + where + "'");
      }
    }
  }
  std::optional<Spec> spec;
  for (auto& [field, s] : asked) {
    if (!s) continue;
    if (spec) bad(field, "only one structured output may be asked for ('" + param + "' and '" + field + "' both are)");
    spec = std::move(s);
    param = field;
  }
  return spec;
}

namespace {

// tool_choice "auto": no grammar until the model opens a call the way its chat format
// writes one (tool_trigger.h).
std::shared_ptr<const constrain::Constraint> auto_tool_calls(const App& app, const ApiRequest& r,
                                                             const std::shared_ptr<const constrain::TokenTable>& table) {
  std::shared_ptr<constrain::ToolTrigger> trigger = app.chat_format->auto_trigger(r.tools, table);
  if (!trigger) return nullptr;  // the format's calls have no grammar: the output stays free
  trigger->tokens = table;
  auto c = std::make_shared<constrain::Constraint>();
  c->tokens = table;
  c->cached = trigger->call ? trigger->call->cached
                            : std::all_of(trigger->arguments.begin(), trigger->arguments.end(),
                                          [](const auto& a) { return a.second->cached; });
  c->trigger = std::move(trigger);
  return c;
}

ConstraintKind metric_kind(Spec::Kind kind) {
  switch (kind) {
    case Spec::Kind::JSON_SCHEMA: return ConstraintKind::JSON_SCHEMA;
    case Spec::Kind::JSON_OBJECT: return ConstraintKind::JSON_OBJECT;
    case Spec::Kind::REGEX: return ConstraintKind::REGEX;
    case Spec::Kind::CHOICE: return ConstraintKind::CHOICE;
    case Spec::Kind::TOOL_CALL:
    case Spec::Kind::XML_TOOL_CALL:
    case Spec::Kind::GEMMA_TOOL_CALL: return ConstraintKind::TOOL_CALL;
  }
  return ConstraintKind::JSON_OBJECT;
}

}  // namespace

void attach_constraint(const App& app, ApiRequest& r, const std::string& prefill) {
  std::optional<Spec> spec = r.structured;
  std::string param = r.structured_param;
  const bool forced_call = r.tool_choice == ToolChoice::REQUIRED || r.tool_choice == ToolChoice::NAMED;
  bool auto_calls = false;
  if (forced_call && !prefill.empty()) {
    // The prompt ends inside the call's opening (chat_prompt.cpp): after `{"name": "` for
    // "required", after the arguments key for a named function.
    const std::string* named = r.tool_choice == ToolChoice::NAMED ? &r.tool_name : nullptr;
    spec = app.chat_format->force_call(r.tools, named).value().rest;
    param = "tools";
  } else if (!spec && r.tool_choice != ToolChoice::NONE && r.tools.is_array() && !r.tools.empty()) {
    // "auto", or a forced call the prompt could not open (a thinking model, harmony).
    auto_calls = true;
  }
  if (!spec && !auto_calls) return;
  const ConstraintKind kind = auto_calls ? (forced_call ? ConstraintKind::TOOL_CALL : ConstraintKind::TOOL_AUTO)
                                         : metric_kind(spec->kind);
  const auto table = token_table(*app.tokenizer);  // built once per tokenizer, not part of a compile
  Metrics& metrics = app.engine->metrics_registry();
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  try {
    r.params.constraint = auto_calls ? auto_tool_calls(app, r, table) : constrain::compile_constraint(*spec, table);
  } catch (const InputError& e) {
    metrics.constraint_refused(kind, seconds());
    bad(spec ? param : "tools", e.what());
  }
  if (!r.params.constraint) return;
  metrics.constraint_compiled(kind, seconds(), r.params.constraint->cached);
}

}  // namespace spark
