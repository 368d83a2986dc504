// json_call.cpp — JSON tool-call objects: their constraints and their reader.
#include "web/chat_format/json_call.h"

#include <random>

namespace spark {
namespace {

using J = nlohmann::ordered_json;
using Spec = constrain::ConstraintSpec;

// Tool-call arguments nest shallowly; deeper text is not a call we would hand to a client.
constexpr size_t kMaxToolJsonDepth = 32;

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// The call's shape after `before_name`: each declared function's name (unless `named`),
// then its parameters schema, then the closing.
Spec call_spec(const JsonCallShape& shape, const J& tools, std::string_view before_name, const std::string* named) {
  Spec s;
  s.kind = Spec::Kind::TOOL_CALL;
  s.closing = std::string(shape.closing);
  const std::string after_name = "\", \"" + std::string(shape.arguments_key) + "\": ";
  for (const auto& t : tools) {
    const J& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (named && name != *named) continue;
    const std::string opening = named ? "" : std::string(before_name) + name + after_name;
    s.tools.emplace_back(opening, function_parameters(fn).dump());
  }
  return s;
}

}  // namespace

std::optional<ForcedCall> JsonCallFormat::force_call(const J& tools, const std::string* named) const {
  ForcedCall f;
  f.prefill = std::string(shape_.opening) + std::string(shape_.before_name);
  if (named) f.prefill += *named + "\", \"" + std::string(shape_.arguments_key) + "\": ";
  f.rest = call_spec(shape_, tools, "", named);
  return f;
}

std::shared_ptr<constrain::ToolTrigger> JsonCallFormat::auto_trigger(
    const J& tools, const std::shared_ptr<const constrain::TokenTable>& table) const {
  auto trigger = std::make_shared<constrain::ToolTrigger>();
  trigger->format = shape_.where;
  trigger->opening = std::string(shape_.opening);
  trigger->call = constrain::compile_constraint(call_spec(shape_, tools, shape_.before_name, nullptr), table);
  return trigger;
}

size_t json_depth(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

size_t json_object_end(std::string_view text, size_t start) {
  size_t depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (depth == 0) return std::string_view::npos;
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

std::string new_tool_call_id() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof kAlphabet - 1)];
  return id;
}

bool parse_tool_call_json(std::string_view text, ToolCall& call) {
  text = trim(text);
  if (text.empty() || text.front() != '{' || json_depth(text, kMaxToolJsonDepth) > kMaxToolJsonDepth) return false;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  std::string arguments = "{}";
  if (args != j.end()) {
    if (args->is_object()) arguments = args->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    else if (args->is_string()) arguments = args->get<std::string>();
    else if (!args->is_null()) return false;
  }
  call.id = new_tool_call_id();
  call.name = name->get<std::string>();
  call.arguments = std::move(arguments);
  return true;
}

}  // namespace spark
