// hermes.cpp — the Hermes / Qwen format: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
// anywhere in the answer. Also what a template that shows no format is given: templates
// that never print the tools are told this format (chat_prompt.cpp).
#include <string>

#include "web/chat_format/json_call.h"
#include "web/chat_format/tagged_call.h"

namespace spark {
namespace {

bool read_json_call(std::string_view body, std::vector<ToolCall>& calls) {
  ToolCall call;
  if (!parse_tool_call_json(body, call)) return false;
  calls.push_back(std::move(call));
  return true;
}

class Hermes : public JsonCallFormat {
 public:
  Hermes()
      : JsonCallFormat(
            {constrain::ToolTrigger::Format::TAG, kToolCallOpen, "\n{\"name\": \"", "arguments", "}\n</tool_call>"}) {}

 private:
  const char* name() const override { return "hermes"; }
  bool detect(const TemplateText& text) const override { return text.with_tools.find(kToolCallOpen) != std::string::npos; }
  std::unique_ptr<AnswerSplitter> answer_splitter() const override { return tagged_calls(read_json_call); }
};

}  // namespace

const ChatFormat& hermes_chat_format() {
  static const Hermes format;
  return format;
}

}  // namespace spark
