// chat_prompt.cpp — rendering chat requests, tool_choice steering and model traits.
//
// What tool_choice enforces: "none" hides the tools from the template and parses no calls;
// "auto" offers them and parses what the model writes; "required" and a named function add
// a system instruction and, for models that are not thinking and whose format can open a
// call in the prompt (Hermes, Llama 3.1, Qwen3-Coder's XML: ChatFormat::force_call), put
// the opening of the call into the prompt, so the answer starts as a call (to that function
// when named); the rest of the call is held to its grammar (structured_output.cpp).
#include "web/chat_prompt.h"

#include "engine/template/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "web/chat_format/think.h"
#include "web/http_error.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

bool thinking_enabled(const App& app, const ApiRequest& r) {
  if (!app.thinking_model) return false;
  auto it = r.template_kwargs.find("enable_thinking");
  if (it == r.template_kwargs.end() || !it->is_boolean()) return app.thinks_unasked;  // as the template defaults it
  return it->get<bool>();
}

// Instructions for templates that never print the tools themselves, in the Hermes style
// the parser reads back.
std::string describe_tools(const J& tools) {
  std::string s = "You may call one or more functions to answer. The functions are:\n<tools>\n";
  for (const auto& t : tools) s += t.dump(-1, ' ', false, J::error_handler_t::replace) + "\n";
  s += "</tools>\nTo call a function, answer with a JSON object inside tags:\n<tool_call>\n"
       "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  return s;
}

void add_system_note(J& messages, const std::string& note) {
  if (note.empty()) return;
  if (!messages.empty() && messages[0]["role"] == "system" && messages[0].contains("content") &&
      messages[0]["content"].is_string()) {
    messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + note;
    return;
  }
  messages.insert(messages.begin(), J{{"role", "system"}, {"content", note}});
}

}  // namespace

void detect_model_traits(App& app) {
  if (!app.chat_template) return;
  const TemplateText text{app.chat_template->source(true), app.chat_template->source(false)};
  app.chat_format = &detect_chat_format(text);
  app.thinking_model = template_thinks(text);
  app.thinks_unasked = app.thinking_model && template_thinks_unasked(text);
}

ChatPrompt build_chat_prompt(const App& app, const ApiRequest& r) {
  if (!app.chat_template)
    throw HttpError(400, "model '" + app.model_id + "' has no chat template; use /v1/completions or set model.chat_template",
                    "invalid_request_error", "messages");
  ChatPrompt p;
  const bool thinking = thinking_enabled(app, r);
  const bool use_tools = r.tool_choice != ToolChoice::NONE && !r.tools.is_null();
  J messages = r.messages;
  std::string note;
  const std::string& source = app.chat_template->source(use_tools);
  if (use_tools && !contains(source, "tools")) note = describe_tools(r.tools);
  if (r.tool_choice == ToolChoice::REQUIRED) note += (note.empty() ? "" : "\n") + std::string("You must call at least one of the functions.");
  if (r.tool_choice == ToolChoice::NAMED) note += std::string(note.empty() ? "" : "\n") + "You must call the function '" + r.tool_name + "'.";
  add_system_note(messages, note);

  J tools = use_tools ? r.tools : J();
  p.text = app.chat_template->render(messages, tools, r.add_generation_prompt, r.template_kwargs);

  p.parser.format = app.chat_format;
  p.parser.tools = use_tools;
  if (use_tools) p.parser.tool_list = r.tools;
  p.parser.reasoning = thinking;
  p.parser.starts_in_reasoning = thinking && prompt_opens_reasoning(p.text);

  if (use_tools && !thinking && (r.tool_choice == ToolChoice::REQUIRED || r.tool_choice == ToolChoice::NAMED)) {
    const auto call = app.chat_format->force_call(r.tools, r.tool_choice == ToolChoice::NAMED ? &r.tool_name : nullptr);
    if (call) p.prefill = call->prefill;
  }
  p.text += p.prefill;
  p.ids = app.tokenizer->encode(p.text, /*add_special_tokens=*/false, /*parse_special=*/true);
  return p;
}

ChatPrompt build_generation_prompt(const App& app, ApiRequest& r) {
  ChatPrompt p = build_chat_prompt(app, r);
  if (p.parser.format->reads_special_tokens()) r.params.skip_special_tokens = false;
  return p;
}

}  // namespace spark
