// chat_format.h — how a chat model writes tool calls and reasoning, behind one interface:
// which templates write the format, how the prompt steers a forced call (tool_choice
// "required" or a named function), what engine/constrain holds a call to, and the parser
// that splits the answer, as it streams, into reasoning, content and tool calls. Each
// format is one file in this folder and one row in registry.cpp.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/constrain/constraint.h"
#include "engine/constrain/tool_trigger.h"

namespace spark {

struct ToolCall {
  std::string id;         // "call_" + 24 random characters
  std::string name;
  std::string arguments;  // a JSON text (an object), as OpenAI sends it
};

struct OutputEvent {
  enum Kind { CONTENT, REASONING, TOOL_CALL } kind = CONTENT;
  std::string text;  // CONTENT / REASONING
  ToolCall call;     // TOOL_CALL
};

// Push text deltas in order, then finish() once. Text that may still turn out to be the
// start of a tag is held back until it is decided; each byte is examined a bounded number
// of times, so hostile output costs time linear in its length.
class OutputParser {
 public:
  virtual ~OutputParser() = default;
  std::vector<OutputEvent> push(std::string_view delta) { return counted(on_push(delta)); }
  // stopped: the model ended its answer with a stop token (harmony's <|return|> or
  // <|call|>, which generation does not hand on as text), so an open message is whole.
  std::vector<OutputEvent> finish(bool stopped = false) { return counted(on_finish(stopped)); }
  size_t num_tool_calls() const { return num_calls_; }

 protected:
  virtual std::vector<OutputEvent> on_push(std::string_view delta) = 0;
  virtual std::vector<OutputEvent> on_finish(bool stopped) = 0;

 private:
  std::vector<OutputEvent> counted(std::vector<OutputEvent> events);
  size_t num_calls_ = 0;
};

class ChatFormat;

// How one answer is read.
struct OutputParserOptions {
  const ChatFormat* format = nullptr;  // null: plain text (with <think> reasoning if asked)
  bool tools = false;                  // tools were offered: calls are parsed
  bool reasoning = false;              // the model thinks: <think>...</think> is reasoning
  bool starts_in_reasoning = false;    // the prompt already opened <think>
  // The tools offered (OpenAI's form), for a format that types each argument by its
  // function's parameters schema (Qwen3-Coder's XML writes every value as bare text).
  nlohmann::ordered_json tool_list = nullptr;
};

std::unique_ptr<OutputParser> make_output_parser(const OutputParserOptions& options);

// The chat template's text, as rendered with tools and without (a template may keep a
// separate tool-use variant).
struct TemplateText {
  const std::string& with_tools;
  const std::string& without_tools;
};

// A forced call: the answer's opening the prompt holds, and the call's rest from there
// (each declared function's name unless one is named, its arguments, the closing).
struct ForcedCall {
  std::string prefill;
  constrain::ConstraintSpec rest;
};

class ChatFormat {
 public:
  virtual ~ChatFormat() = default;
  virtual const char* name() const = 0;
  // Whether a chat template writes its tool calls this way.
  virtual bool detect(const TemplateText& text) const = 0;
  // The answer is read from the tokenizer's special tokens, so they stay in its text.
  virtual bool reads_special_tokens() const { return false; }
  // tool_choice "required" (named: null) or a named function, for a model that is not
  // thinking; nullopt when this format's prompt cannot open the call (the call is then
  // constrained from where the model opens it, as under "auto").
  virtual std::optional<ForcedCall> force_call(const nlohmann::ordered_json& tools, const std::string* named) const = 0;
  // tool_choice "auto": where the model opens a call and what each call is held to from
  // there; `tokens` is set by the caller. Null when this format's calls cannot be held to
  // a grammar: the output then stays free, under "auto" and for a forced call alike.
  virtual std::shared_ptr<constrain::ToolTrigger> auto_trigger(
      const nlohmann::ordered_json& tools, const std::shared_ptr<const constrain::TokenTable>& table) const = 0;
  virtual std::unique_ptr<OutputParser> make_parser(const OutputParserOptions& options) const = 0;
};

// The registry (registry.cpp). Detection tries the registered formats, then the built-in
// rows in order; a template that shows none gets the default (Hermes).
const ChatFormat& detect_chat_format(const TemplateText& text);
const ChatFormat& default_chat_format();
const ChatFormat* find_chat_format(std::string_view name);  // null when none has the name
// A format tried before the built-in rows (registered before serving starts).
void register_chat_format(const ChatFormat& format);
void unregister_chat_format(const ChatFormat& format);

// A declared function's parameters schema ({"type": "object"} when it gives none).
nlohmann::ordered_json function_parameters(const nlohmann::ordered_json& function);

}  // namespace spark
