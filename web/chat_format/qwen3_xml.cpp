// qwen3_xml.cpp — the XML format of Qwen3-Coder, Qwen3.5 and Qwen3.6, anywhere in the answer:
//   <tool_call>
//   <function=NAME>
//   <parameter=KEY>
//   VALUE
//   </parameter>
//   </function>
//   </tool_call>
// Every VALUE is bare text, so it is typed by the declared parameter's schema (a string
// stays text; integer, number, boolean, object and array are read as JSON, and stay a
// string when they do not read as that type; null / None is null where the type is not
// string or the schema allows null). A value ends at the first </parameter>
// that the next parameter, </function> or the body's end follows, so the tag itself may
// appear inside a value. Calls are held to a grammar (engine/constrain/xml_parameters.h):
// forced ones from the prompt's "<tool_call>\n<function=", under "auto" from the model's
// <tool_call>.
#include <map>
#include <memory>
#include <string>

#include "engine/constrain/xml_parameters.h"
#include "engine/util/check.h"
#include "web/chat_format/json_call.h"
#include "web/chat_format/tagged_call.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

// Bare values nest shallowly; deeper JSON is kept as the text it is.
constexpr size_t kMaxValueJsonDepth = 32;

bool starts_with(std::string_view s, size_t at, std::string_view what) { return s.substr(at, what.size()) == what; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return out;
}

// Python's None as the Qwen templates print a null argument, or JSON's null.
bool is_null_word(std::string_view s) {
  const std::string l = lower(s);
  return l == "null" || l == "none";
}

// A value as its parameter's schema types it (null schema: not declared, kept as text).
J typed_value(std::string_view raw, const J* schema) {
  if (!schema) return std::string(raw);
  bool nullable = false;
  const std::string type = constrain::xml_value_type(*schema, nullable);
  const std::string_view text = trim_space(raw);
  if (nullable && is_null_word(text)) return nullptr;
  if (type.empty() || type == "string") return std::string(raw);
  if (is_null_word(text)) return nullptr;  // vLLM reads these as null for any other type
  if (type == "boolean") {
    const std::string l = lower(text);
    if (l == "true" || l == "false") return l == "true";
    return std::string(raw);
  }
  if (text.empty() || json_depth(text, kMaxValueJsonDepth) > kMaxValueJsonDepth) return std::string(raw);
  J value = J::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool fits = (type == "integer" && value.is_number_integer()) || (type == "number" && value.is_number()) ||
                    (type == "object" && value.is_object()) || (type == "array" && value.is_array());
  return fits ? value : J(std::string(raw));
}

// Each declared function's parameter schemas, by function name.
using DeclaredParams = std::map<std::string, J, std::less<>>;

DeclaredParams declared_params(const J& tools) {
  DeclaredParams params;
  if (!tools.is_array()) return params;
  for (const auto& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const J& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) continue;
    const J schema = function_parameters(fn);
    params[fn["name"].get<std::string>()] =
        schema.contains("properties") && schema["properties"].is_object() ? schema["properties"] : J::object();
  }
  return params;
}

// Where the value starting at `from` ends: the first </parameter> followed (past
// whitespace) by another parameter, </function> or the body's end; npos when none is.
// Each candidate's whitespace is skipped once, so the scan is linear.
size_t value_end(std::string_view body, size_t from) {
  for (size_t at = body.find(kParameterClose, from); at != std::string_view::npos;
       at = body.find(kParameterClose, at + 1)) {
    const size_t next = skip_space(body, at + kParameterClose.size());
    if (next == body.size() || starts_with(body, next, kParameterOpen) || starts_with(body, next, kFunctionClose))
      return at;
  }
  return std::string_view::npos;
}

// The text up to '>' from `at` (a name), `at` then past the '>'; false when none is there.
bool read_name(std::string_view body, size_t& at, std::string& name) {
  const size_t close = body.find('>', at);
  if (close == std::string_view::npos) return false;
  name = std::string(trim_space(body.substr(at, close - at)));
  at = close + 1;
  return !name.empty() && name.find('\n') == std::string::npos;
}

// One <function=...>...</function> from `at` (past leading whitespace); `at` then past it.
bool read_function(std::string_view body, size_t& at, const DeclaredParams& declared, ToolCall& call) {
  at = skip_space(body, at);
  if (!starts_with(body, at, kFunctionOpen)) return false;
  at += kFunctionOpen.size();
  if (!read_name(body, at, call.name)) return false;
  const auto fn = declared.find(call.name);
  J arguments = J::object();
  for (;;) {
    at = skip_space(body, at);
    if (starts_with(body, at, kFunctionClose)) {
      at += kFunctionClose.size();
      break;
    }
    if (!starts_with(body, at, kParameterOpen)) return false;
    at += kParameterOpen.size();
    std::string key;
    if (!read_name(body, at, key)) return false;
    const size_t end = value_end(body, at);
    if (end == std::string_view::npos) return false;
    // The format puts one newline after the opening tag and one before the closing one.
    std::string_view raw = body.substr(at, end - at);
    if (!raw.empty() && raw.front() == '\n') raw.remove_prefix(1);
    if (!raw.empty() && raw.back() == '\n') raw.remove_suffix(1);
    const J* schema = nullptr;
    if (fn != declared.end() && fn->second.contains(key)) schema = &fn->second[key];
    arguments[key] = typed_value(raw, schema);
    at = end + kParameterClose.size();
  }
  call.id = new_tool_call_id();
  call.arguments = arguments.dump(-1, ' ', false, J::error_handler_t::replace);
  return true;
}

// A call's body: one or more functions, nothing else but whitespace.
bool read_xml_calls(std::string_view body, const DeclaredParams& declared, std::vector<ToolCall>& calls) {
  std::vector<ToolCall> found;
  size_t at = 0;
  do {
    ToolCall call;
    if (!read_function(body, at, declared, call)) return false;
    found.push_back(std::move(call));
    at = skip_space(body, at);
  } while (at < body.size());
  for (auto& c : found) calls.push_back(std::move(c));
  return true;
}

bool contains(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

class Qwen3Xml : public ChatFormat {
  const char* name() const override { return "qwen3_xml"; }
  bool detect(const TemplateText& text) const override {
    return contains(text.with_tools, kFunctionOpen) && contains(text.with_tools, kParameterOpen);
  }
  std::optional<ForcedCall> force_call(const J& tools, const std::string* named) const override {
    ForcedCall f;
    f.prefill = std::string(kToolCallOpen) + "\n" + std::string(kFunctionOpen);
    if (named) f.prefill += *named + ">\n";
    f.rest = call_spec(tools, "", named);
    return f;
  }
  std::shared_ptr<constrain::ToolTrigger> auto_trigger(
      const J& tools, const std::shared_ptr<const constrain::TokenTable>& table) const override {
    auto trigger = std::make_shared<constrain::ToolTrigger>();
    trigger->format = constrain::ToolTrigger::Format::TAG;
    trigger->opening = std::string(kToolCallOpen);
    trigger->call = constrain::compile_constraint(call_spec(tools, "\n" + std::string(kFunctionOpen), nullptr), table);
    return trigger;
  }
  // The call after `before_name`: each declared function's name (unless `named`), its
  // parameters, and the closing tags.
  static constrain::ConstraintSpec call_spec(const J& tools, const std::string& before_name, const std::string* named) {
    constrain::ConstraintSpec s;
    s.kind = constrain::ConstraintSpec::Kind::XML_TOOL_CALL;
    s.closing = std::string(kFunctionClose) + "\n" + std::string(kToolCallClose);
    for (const auto& t : tools) {
      const J& fn = t["function"];
      const std::string name = fn["name"].get<std::string>();
      if (named && name != *named) continue;
      if (name.find_first_of(">\n") != std::string::npos)
        throw InputError("tool call: Qwen3-Coder's XML cannot write the function name '" + name + "' ('>' or a newline)");
      s.tools.emplace_back(named ? "" : before_name + name + ">\n", function_parameters(fn).dump());
    }
    return s;
  }
  std::unique_ptr<OutputParser> make_parser(const OutputParserOptions& options) const override {
    if (!options.tools) return think_then(options, content_only());
    auto declared = std::make_shared<const DeclaredParams>(declared_params(options.tool_list));
    return think_then(options, tagged_calls([declared](std::string_view body, std::vector<ToolCall>& calls) {
                        return read_xml_calls(body, *declared, calls);
                      }));
  }
};

}  // namespace

const ChatFormat& qwen3_xml_chat_format() {
  static const Qwen3Xml format;
  return format;
}

}  // namespace spark
