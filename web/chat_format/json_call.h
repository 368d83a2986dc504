// json_call.h — a tool call written as one JSON object, {"name": NAME, KEY: {...}}, as the
// Hermes and Llama 3.1 formats write it: its shape in the prompt and the constraints, and
// reading it back. Also the JSON nesting guard request bodies share.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "web/chat_format/chat_format.h"
#include "web/chat_format/think.h"

namespace spark {

struct JsonCallShape {
  constrain::ToolTrigger::Format where;  // where the opening counts (anywhere, or leading)
  std::string_view opening;              // what opens a call in free text
  std::string_view before_name;          // from the opening to the function's name
  std::string_view arguments_key;        // "arguments" / "parameters"
  std::string_view closing;              // after the arguments object
};

// A format whose calls are JSON objects of one shape: a forced call opens in the prompt up
// to the name (to the arguments when named); the answer is <think> reasoning, then what
// the format's AnswerSplitter reads (all content when no tools were offered).
class JsonCallFormat : public ChatFormat {
 public:
  explicit JsonCallFormat(const JsonCallShape& shape) : shape_(shape) {}
  std::optional<ForcedCall> force_call(const nlohmann::ordered_json& tools, const std::string* named) const override;
  std::shared_ptr<constrain::ToolTrigger> auto_trigger(
      const nlohmann::ordered_json& tools, const std::shared_ptr<const constrain::TokenTable>& table) const override;
  std::unique_ptr<OutputParser> make_parser(const OutputParserOptions& options) const override {
    return think_then(options, options.tools ? answer_splitter() : content_only());
  }

 protected:
  virtual std::unique_ptr<AnswerSplitter> answer_splitter() const = 0;

 private:
  JsonCallShape shape_;
};

// Parses one tool-call JSON object ({"name", "arguments"|"parameters"}); false when the
// text is not one (the caller then keeps it as content).
bool parse_tool_call_json(std::string_view text, ToolCall& call);
// The end (one past) of the JSON object starting at text[start] == '{', or npos when the
// text ends first. Linear: strings and escapes are skipped in one pass.
size_t json_object_end(std::string_view text, size_t start);
std::string new_tool_call_id();

// Nesting depth of a JSON text ([ and { outside strings), scanning linearly and stopping
// early past `limit`; used to refuse depth bombs before building a tree.
size_t json_depth(std::string_view text, size_t limit);

}  // namespace spark
