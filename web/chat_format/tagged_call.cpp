// tagged_call.cpp — the <tool_call>...</tool_call> splitter the tag formats share.
#include "web/chat_format/tagged_call.h"

#include <string>
#include <utility>

namespace spark {
namespace {

class TaggedCalls : public AnswerSplitter {
 public:
  explicit TaggedCalls(CallBodyReader read) : read_(std::move(read)) {}

  void run(std::string& buf, bool final, std::vector<OutputEvent>& out) override {
    for (;;) {
      if (in_call_) {
        size_t from = scanned_ >= kToolCallClose.size() ? scanned_ - (kToolCallClose.size() - 1) : 0;
        size_t pos = buf.find(kToolCallClose, from);
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
      if (!strip_space(buf) || !emit_until(buf, kToolCallOpen, OutputEvent::CONTENT, final, out)) return;
      in_call_ = true;
      scanned_ = 0;
    }
  }

 private:
  void end_call(std::string& buf, std::vector<OutputEvent>& out, size_t body_len, bool closed) {
    std::string_view body(buf.data(), body_len);
    std::vector<ToolCall> calls;
    if (read_(body, calls)) {
      emit_calls(out, calls);
    } else {
      // Not a call after all: the client sees exactly what the model wrote.
      std::string raw = std::string(kToolCallOpen) + std::string(body) + (closed ? std::string(kToolCallClose) : "");
      emit(out, OutputEvent::CONTENT, raw);
    }
    buf.erase(0, closed ? body_len + kToolCallClose.size() : buf.size());
    scanned_ = 0;
  }

  CallBodyReader read_;
  bool in_call_ = false;
  size_t scanned_ = 0;  // bytes of the call's body already searched for the closing tag
};

}  // namespace

std::unique_ptr<AnswerSplitter> tagged_calls(CallBodyReader read) { return std::make_unique<TaggedCalls>(std::move(read)); }

}  // namespace spark
