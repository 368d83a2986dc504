// hermes.cpp — the Hermes / Qwen format: <tool_call>{"name": ..., "arguments": {...}}</tool_call>,
// anywhere in the answer. Also what a template that shows no format is given: templates
// that never print the tools are told this format (chat_prompt.cpp).
#include <string>

#include "web/chat_format/json_call.h"

namespace spark {
namespace {

constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";

// Content with calls between the tags; a body that is not a call stays content, tags and all.
class HermesAnswer : public AnswerSplitter {
 public:
  void run(std::string& buf, bool final, std::vector<OutputEvent>& out) override {
    for (;;) {
      if (in_call_) {
        size_t from = scanned_ >= kToolClose.size() ? scanned_ - (kToolClose.size() - 1) : 0;
        size_t pos = buf.find(kToolClose, from);
        if (pos == std::string::npos) {
          scanned_ = buf.size();
          if (final) {
            end_call(buf, out, buf.size(), false);
            in_call_ = false;
          }
          return;
        }
        end_call(buf, out, pos, true);
        in_call_ = false;
        strip_leading_space_ = true;
        continue;
      }
      if (!strip_space(buf) || !emit_until(buf, kToolOpen, OutputEvent::CONTENT, final, out)) return;
      in_call_ = true;
      scanned_ = 0;
    }
  }

 private:
  void end_call(std::string& buf, std::vector<OutputEvent>& out, size_t body_len, bool closed) {
    std::string_view body(buf.data(), body_len);
    ToolCall call;
    if (parse_tool_call_json(body, call)) {
      OutputEvent e;
      e.kind = OutputEvent::TOOL_CALL;
      e.call = std::move(call);
      out.push_back(std::move(e));
    } else {
      // Not a call after all: the client sees exactly what the model wrote.
      std::string raw = std::string(kToolOpen) + std::string(body) + (closed ? std::string(kToolClose) : "");
      emit(out, OutputEvent::CONTENT, raw);
    }
    buf.erase(0, closed ? body_len + kToolClose.size() : buf.size());
    scanned_ = 0;
  }

  bool in_call_ = false;
  size_t scanned_ = 0;  // bytes of the call's body already searched for the closing tag
};

class Hermes : public JsonCallFormat {
 public:
  Hermes()
      : JsonCallFormat(
            {constrain::ToolTrigger::Format::TAG, kToolOpen, "\n{\"name\": \"", "arguments", "}\n</tool_call>"}) {}

 private:
  const char* name() const override { return "hermes"; }
  bool detect(const TemplateText& text) const override { return text.with_tools.find(kToolOpen) != std::string::npos; }
  std::unique_ptr<AnswerSplitter> answer_splitter() const override { return std::make_unique<HermesAnswer>(); }
};

}  // namespace

const ChatFormat& hermes_chat_format() {
  static const Hermes format;
  return format;
}

}  // namespace spark
