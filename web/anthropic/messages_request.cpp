// messages_request.cpp — Anthropic Messages content blocks, tools and settings as a chat body.
#include "web/anthropic/messages_request.h"

#include <set>

#include "web/api_convert.h"
#include "web/http_error.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

std::string string_at(const J& obj, const char* key, const std::string& where, const std::string& param) {
  const J* v = json_field(obj, key);
  if (!v || !v->is_string())
    bad_request(param,
                "'" + where + "." + key + "' must be a string, got " + std::string(v ? v->type_name() : "nothing"));
  return v->get<std::string>();
}

std::string type_of(const J& block) {
  const J* t = json_field(block, "type");
  return t && t->is_string() ? t->get<std::string>() : "";
}

// A string, or text blocks joined by newlines (system prompts, tool results).
std::string text_of(const J& content, const std::string& where, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(param, "'" + where + "' must be a string or an array of text blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!content[i].is_object() || type_of(content[i]) != "text")
      bad_request(param, "'" + at + "' must be a text block: this model takes text only");
    text += (text.empty() ? "" : "\n") + string_at(content[i], "text", at, param);
  }
  return text;
}

// One Anthropic message as chat messages: a user turn's tool_result blocks become tool
// messages (before its text); an assistant turn's tool_use blocks become its tool_calls and
// its thinking blocks its reasoning_content.
void add_message(const J& m, const std::string& where, std::set<std::string>& tool_use_ids, J& out) {
  if (!m.is_object()) bad_request("messages", "'" + where + "' must be an object");
  const std::string role = string_at(m, "role", where, "messages");
  if (role != "user" && role != "assistant")
    bad_request("messages", "'" + where + ".role' must be user or assistant, got '" + role + "'");
  const J* content = json_field(m, "content");
  if (!content) bad_request("messages", "'" + where + ".content' is required");
  if (content->is_string()) {
    out.push_back(J{{"role", role}, {"content", *content}});
    return;
  }
  if (!content->is_array())
    bad_request("messages", "'" + where + ".content' must be a string or an array of content blocks");
  std::string text, reasoning;
  J calls = J::array();
  for (size_t i = 0; i < content->size(); ++i) {
    const J& block = (*content)[i];
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    if (!block.is_object()) bad_request("messages", "'" + at + "' must be an object");
    const std::string type = type_of(block);
    if (type == "text") {
      text += (text.empty() ? "" : "\n") + string_at(block, "text", at, "messages");
    } else if (type == "tool_use" && role == "assistant") {
      const std::string id = string_at(block, "id", at, "messages");
      const J* input = json_field(block, "input");
      if (input && !input->is_object()) bad_request("messages", "'" + at + ".input' must be an object");
      calls.push_back(J{{"id", id},
                        {"type", "function"},
                        {"function", J{{"name", string_at(block, "name", at, "messages")},
                                       {"arguments", input ? *input : J::object()}}}});
      tool_use_ids.insert(id);
    } else if (type == "tool_result" && role == "user") {
      const std::string id = string_at(block, "tool_use_id", at, "messages");
      if (!tool_use_ids.count(id))
        bad_request("messages", "'" + at + "': tool_result names tool_use_id '" + id +
                                    "', which no earlier assistant tool_use block has");
      const J* result = json_field(block, "content");
      std::string result_text = result ? text_of(*result, at + ".content", "messages") : "";
      if (const J* e = json_field(block, "is_error"); e && e->is_boolean() && e->get<bool>())
        result_text = "Error: " + result_text;
      out.push_back(J{{"role", "tool"}, {"tool_call_id", id}, {"content", result_text}});
    } else if (type == "thinking" && role == "assistant") {
      reasoning += string_at(block, "thinking", at, "messages");
    } else if (type == "redacted_thinking" && role == "assistant") {
      // Encrypted by another server: nothing this model can read.
    } else {
      bad_request("messages", "'" + at + "': content block type '" + type + "' is not supported in a " + role +
                                  " message (text, tool_use, tool_result and thinking are)");
    }
  }
  if (role == "user" && text.empty() && !out.empty() && out.back()["role"] == "tool") return;  // tool results only
  J msg{{"role", role}, {"content", text}};
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  out.push_back(std::move(msg));
}

J chat_tool_choice(const J& choice) {
  if (!choice.is_object()) bad_request("tool_choice", "'tool_choice' must be an object with a 'type'");
  const std::string type = type_of(choice);
  if (type == "auto" || type == "none") return type;
  if (type == "any") return "required";
  if (type == "tool")
    return J{{"type", "function"}, {"function", J{{"name", string_at(choice, "name", "tool_choice", "tool_choice")}}}};
  bad_request("tool_choice", "'tool_choice.type' must be auto, any, tool or none, got '" + type + "'");
}

}  // namespace

ApiRequest parse_messages_request(std::string_view text, int64_t vocab_size, const std::string& model_id,
                                  bool count_only) {
  const J body = parse_json_body(text);
  J chat = J::object();
  if (const J* v = json_field(body, "model")) chat["model"] = *v;
  if (!count_only) {
    const J* max_tokens = json_field(body, "max_tokens");
    if (!max_tokens) bad_request("max_tokens", "'max_tokens' is required");
    if (!max_tokens->is_number_integer())
      bad_request("max_tokens", "'max_tokens' must be an integer, got " + std::string(max_tokens->type_name()));
    chat["max_tokens"] = *max_tokens;
  }
  J messages = J::array();
  if (const J* v = json_field(body, "system"))
    messages.push_back(J{{"role", "system"}, {"content", text_of(*v, "system", "system")}});
  const J* given = json_field(body, "messages");
  if (!given) bad_request("messages", "'messages' is required");
  if (!given->is_array())
    bad_request("messages", "'messages' must be an array, got " + std::string(given->type_name()));
  if (given->empty()) bad_request("messages", "'messages' must hold at least one message");
  if (given->size() > kMaxMessages)
    bad_request("messages", "'messages' holds at most " + std::to_string(kMaxMessages) + " messages, got " +
                                std::to_string(given->size()));
  std::set<std::string> tool_use_ids;
  for (size_t i = 0; i < given->size(); ++i)
    add_message((*given)[i], "messages[" + std::to_string(i) + "]", tool_use_ids, messages);
  chat["messages"] = std::move(messages);

  if (const J* v = json_field(body, "tools"); v && !v->empty())
    chat["tools"] = flat_tools_as_chat(*v, "input_schema", true, {"", "custom"},
                                       "sparkd serves client tools (name, input_schema) only");
  if (const J* v = json_field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*v);
  if (const J* v = json_field(body, "stop_sequences")) chat["stop"] = *v;
  for (const char* key : {"temperature", "top_p", "top_k", "stream"})
    if (const J* v = json_field(body, key)) chat[key] = *v;
  copy_sampling_extensions(body, chat);
  if (const J* v = json_field(body, "output_config")) {
    if (!v->is_object()) bad_request("output_config", "'output_config' must be an object");
    if (const J* format = json_field(*v, "format")) {
      // {"type": "json_schema", "schema": {...}}: the output follows the schema as written.
      if (!format->is_object() || type_of(*format) != "json_schema")
        bad_request("output_config", "'output_config.format' must be {\"type\": \"json_schema\", \"schema\": {...}}");
      const J* schema = json_field(*format, "schema");
      if (!schema) bad_request("output_config", "'output_config.format' needs a 'schema'");
      chat["response_format"] = J{{"type", "json_schema"}, {"json_schema", J{{"name", "output"}, {"schema", *schema}}}};
    }
  }
  if (const J* v = json_field(body, "metadata"); v && !v->is_object())
    bad_request("metadata", "'metadata' must be an object");
  if (const J* v = json_field(body, "thinking")) {
    if (!v->is_object()) bad_request("thinking", "'thinking' must be an object with a 'type'");
    const std::string type = type_of(*v);
    if (type != "enabled" && type != "disabled" && type != "adaptive")
      bad_request("thinking", "'thinking.type' must be enabled, disabled or adaptive, got '" + type + "'");
    // Thinking models' templates switch it with enable_thinking (Qwen3 and the like).
    chat["chat_template_kwargs"] = J{{"enable_thinking", type != "disabled"}};
  }
  if (count_only) chat.erase("stream");
  ApiRequest request;
  try {
    request = parse_api_body(chat, ApiKind::CHAT, vocab_size, model_id);
  } catch (const HttpError& e) {
    // The chat parser names its own fields; say them as this API calls them.
    if (e.param == "stop")
      throw HttpError(e.status, std::string(e.what()) + " (stop_sequences)", e.type, "stop_sequences", e.code);
    if (e.param == "response_format") throw HttpError(e.status, e.what(), e.type, "output_config", e.code);
    throw;
  }
  if (request.structured_param == "response_format") request.structured_param = "output_config";
  return request;
}

}  // namespace spark
