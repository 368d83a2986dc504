// responses_request.cpp — Responses API input items, tools and settings as a chat body.
#include "web/openai/responses_request.h"

#include <set>

#include "web/api_convert.h"
#include "web/http_error.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

std::string string_of(const J& v, const std::string& where, const std::string& param) {
  if (!v.is_string()) bad_request(param, "'" + where + "' must be a string, got " + std::string(v.type_name()));
  return v.get<std::string>();
}

std::string type_of(const J& item) {
  const J* t = json_field(item, "type");
  return t && t->is_string() ? t->get<std::string>() : "";
}

// Message content: a string, or parts of input_text / output_text (text only) as the chat
// parser's text parts.
J content_parts(const J& content, const std::string& where) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad_request("input", "'" + where + "' must be a string or an array of content parts");
  J parts = J::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const J& part = content[i];
    std::string at = where + "[" + std::to_string(i) + "]";
    if (!part.is_object()) bad_request("input", "'" + at + "' must be an object");
    std::string type = type_of(part);
    if (type != "input_text" && type != "output_text" && type != "text")
      bad_request("input", "'" + at + "': content type '" + type + "' is not supported: this model takes text only");
    parts.push_back(
        J{{"type", "text"}, {"text", string_of(part.contains("text") ? part["text"] : J(), at + ".text", "input")}});
  }
  return parts;
}

// The text of a function_call_output's output: a string or input_text parts.
std::string output_text(const J& output, const std::string& where) {
  if (output.is_string()) return output.get<std::string>();
  J parts = content_parts(output, where);
  std::string text;
  for (const auto& p : parts) text += (text.empty() ? "" : "\n") + p["text"].get<std::string>();
  return text;
}

// An assistant message to attach function calls and reasoning to: the last message when it
// is an assistant turn that has not been answered by a tool yet, else a new one.
J& assistant_turn(J& messages) {
  if (messages.empty() || messages.back()["role"] != "assistant")
    messages.push_back(J{{"role", "assistant"}, {"content", ""}});
  return messages.back();
}

J input_messages(const J& input, const std::set<std::string>& known_call_ids) {
  J messages = J::array();
  if (input.is_string()) {
    messages.push_back(J{{"role", "user"}, {"content", input}});
    return messages;
  }
  if (!input.is_array())
    bad_request("input", "'input' must be a string or an array of input items, got " + std::string(input.type_name()));
  if (input.empty()) bad_request("input", "'input' must hold at least one item");
  if (input.size() > kMaxMessages)
    bad_request("input", "'input' holds at most " + std::to_string(kMaxMessages) + " items, got " +
                             std::to_string(input.size()));
  std::set<std::string> call_ids = known_call_ids;
  std::string reasoning;  // a reasoning item waits for the assistant turn it belongs to
  for (size_t i = 0; i < input.size(); ++i) {
    const J& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) bad_request("input", "'" + where + "' must be an object");
    std::string type = type_of(item);
    if (type.empty() && item.contains("role")) type = "message";
    if (type == "message") {
      std::string role = string_of(item.contains("role") ? item["role"] : J(), where + ".role", "input");
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        bad_request("input", "'" + where + ".role' must be user, system, developer or assistant, got '" + role + "'");
      const J* content = json_field(item, "content");
      if (!content) bad_request("input", "'" + where + ".content' is required");
      J msg{{"role", role}, {"content", content_parts(*content, where + ".content")}};
      if (role == "assistant" && !reasoning.empty()) msg["reasoning_content"] = std::exchange(reasoning, "");
      messages.push_back(std::move(msg));
    } else if (type == "function_call") {
      std::string call_id = string_of(item.contains("call_id") ? item["call_id"] : J(), where + ".call_id", "input");
      std::string name = string_of(item.contains("name") ? item["name"] : J(), where + ".name", "input");
      std::string arguments =
          string_of(item.contains("arguments") ? item["arguments"] : J(), where + ".arguments", "input");
      J& turn = assistant_turn(messages);
      if (!reasoning.empty()) turn["reasoning_content"] = std::exchange(reasoning, "");
      if (!turn.contains("tool_calls")) turn["tool_calls"] = J::array();
      turn["tool_calls"].push_back(
          J{{"id", call_id}, {"type", "function"}, {"function", J{{"name", name}, {"arguments", arguments}}}});
      call_ids.insert(call_id);
    } else if (type == "function_call_output") {
      std::string call_id = string_of(item.contains("call_id") ? item["call_id"] : J(), where + ".call_id", "input");
      if (!call_ids.count(call_id))
        bad_request("input",
                    "'" + where + "': no function call found for function_call_output with call_id '" + call_id + "'");
      const J* output = json_field(item, "output");
      if (!output) bad_request("input", "'" + where + ".output' is required");
      messages.push_back(
          J{{"role", "tool"}, {"tool_call_id", call_id}, {"content", output_text(*output, where + ".output")}});
    } else if (type == "reasoning") {
      // The model's own earlier reasoning, given back: its text parts (or summary) go to the
      // next assistant turn as reasoning_content, where the chat template wants it.
      const J* parts = json_field(item, "content");
      if (!parts || !parts->is_array() || parts->empty()) parts = json_field(item, "summary");
      if (parts && !parts->is_array()) bad_request("input", "'" + where + "' content and summary must be arrays");
      for (size_t k = 0; parts && k < parts->size(); ++k) {
        const J& p = (*parts)[k];
        if (!p.is_object()) bad_request("input", "'" + where + "' parts must be objects");
        reasoning += string_of(p.contains("text") ? p["text"] : J(), where + " part text", "input");
      }
    } else {
      bad_request("input", "'" + where + "': input item type '" + (type.empty() ? std::string("(none)") : type) +
                               "' is not supported: use message, function_call, function_call_output or reasoning");
    }
  }
  return messages;
}

J chat_tool_choice(const J& choice) {
  if (choice.is_string()) return choice;
  if (!choice.is_object() || type_of(choice) != "function" || !choice.contains("name"))
    bad_request("tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"name\": ...}");
  return J{{"type", "function"}, {"function", J{{"name", choice["name"]}}}};
}

std::set<std::string> call_ids_of(const J& messages) {
  std::set<std::string> ids;
  for (const auto& m : messages)
    if (m.contains("tool_calls"))
      for (const auto& c : m["tool_calls"])
        if (c.contains("id") && c["id"].is_string()) ids.insert(c["id"].get<std::string>());
  return ids;
}

// text.format is the chat API's response_format with the json_schema fields flattened:
// {"type": "json_schema", "name", "schema", "strict"}.
J chat_response_format(const J& format) {
  const std::string type = format.is_object() ? type_of(format) : "";
  if (type == "text" || type == "json_object") return J{{"type", type}};
  if (type != "json_schema")
    bad_request("text.format", "'text.format' must be an object whose type is text, json_object or json_schema");
  J schema = J::object();
  for (const char* key : {"name", "schema", "strict", "description"})
    if (const J* v = json_field(format, key)) schema[key] = *v;
  if (!schema.contains("schema")) bad_request("text.format", "text.format type 'json_schema' needs a 'schema'");
  return J{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view text, const ResponseStore& store, int64_t vocab_size,
                                         const std::string& model_id) {
  ResponsesRequest r;
  r.body = parse_json_body(text);
  const J& body = r.body;
  for (const char* unsupported : {"background", "conversation", "prompt"})
    if (json_field(body, unsupported))
      bad_request(unsupported, "'" + std::string(unsupported) + "' is not supported by this server");
  if (const J* v = json_field(body, "top_logprobs"); v && !(v->is_number_integer() && v->get<int64_t>() == 0))
    bad_request("top_logprobs", "'top_logprobs' is not supported on /v1/responses; use /v1/chat/completions");

  J chat = J::object();
  if (const J* v = json_field(body, "model")) chat["model"] = *v;
  J messages = J::array();
  if (const J* v = json_field(body, "instructions"))
    messages.push_back(J{{"role", "system"}, {"content", string_of(*v, "instructions", "instructions")}});
  if (const J* v = json_field(body, "previous_response_id")) {
    std::string id = string_of(*v, "previous_response_id", "previous_response_id");
    r.previous = store.get(id);
    if (!r.previous)
      throw HttpError(
          404,
          "Previous response with id '" + id +
              "' not found (never stored, or forgotten: the server keeps the last server.max_stored_responses)",
          "invalid_request_error", "previous_response_id", "previous_response_not_found");
    for (auto& m : ResponseStore::conversation(*r.previous)) messages.push_back(std::move(m));
  }
  const J* input = json_field(body, "input");
  if (!input) bad_request("input", "'input' is required");
  r.new_messages = input_messages(*input, call_ids_of(messages));
  for (const auto& m : r.new_messages) messages.push_back(m);
  if (messages.size() > kMaxMessages)
    bad_request("input", "the conversation holds " + std::to_string(messages.size()) + " messages; at most " +
                             std::to_string(kMaxMessages));
  chat["messages"] = std::move(messages);

  if (const J* v = json_field(body, "tools"); v && !v->empty())
    chat["tools"] = flat_tools_as_chat(*v, "parameters", false, {"function"}, "sparkd serves function tools only");
  if (const J* v = json_field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*v);
  if (const J* v = json_field(body, "max_output_tokens")) {
    if (!v->is_number_integer())
      bad_request("max_output_tokens", "'max_output_tokens' must be an integer, got " + std::string(v->type_name()));
    chat["max_tokens"] = *v;
  }
  for (const char* key : {"temperature", "top_p", "stream", "user", "stop"})
    if (const J* v = json_field(body, key)) chat[key] = *v;
  copy_sampling_extensions(body, chat);
  if (const J* v = json_field(body, "parallel_tool_calls"); v && !v->is_boolean())
    bad_request("parallel_tool_calls", "'parallel_tool_calls' must be true or false");
  if (const J* v = json_field(body, "metadata"); v && !v->is_object())
    bad_request("metadata", "'metadata' must be an object");
  if (const J* v = json_field(body, "store")) {
    if (!v->is_boolean()) bad_request("store", "'store' must be true or false");
    r.store = v->get<bool>();
  }
  if (const J* v = json_field(body, "text")) {
    if (!v->is_object()) bad_request("text", "'text' must be an object");
    if (const J* format = json_field(*v, "format")) chat["response_format"] = chat_response_format(*format);
  }
  J kwargs = J::object();
  if (const J* v = json_field(body, "reasoning")) {
    if (!v->is_object()) bad_request("reasoning", "'reasoning' must be an object");
    if (const J* effort = json_field(*v, "effort")) {
      std::string e = string_of(*effort, "reasoning.effort", "reasoning");
      if (e != "none" && e != "minimal" && e != "low" && e != "medium" && e != "high" && e != "xhigh")
        bad_request("reasoning",
                    "'reasoning.effort' must be none, minimal, low, medium, high or xhigh, got '" + e + "'");
      // Templates that take an effort read reasoning_effort (gpt-oss); Qwen3-style ones
      // switch thinking off with enable_thinking.
      kwargs["reasoning_effort"] = e == "none" || e == "minimal" ? "low" : e;
      if (e == "none") kwargs["enable_thinking"] = false;
    }
  }
  if (const J* v = json_field(body, "chat_template_kwargs")) {
    if (!v->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    for (const auto& [k, val] : v->items()) kwargs[k] = val;
  }
  if (!kwargs.empty()) chat["chat_template_kwargs"] = std::move(kwargs);
  try {
    r.chat = parse_api_body(chat, ApiKind::CHAT, vocab_size, model_id);
  } catch (const HttpError& e) {
    if (e.param != "response_format") throw;
    throw HttpError(e.status, e.what(), e.type, "text.format", e.code);
  }
  if (r.chat.structured_param == "response_format") r.chat.structured_param = "text.format";
  return r;
}

}  // namespace spark
