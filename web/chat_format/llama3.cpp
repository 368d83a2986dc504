// llama3.cpp — the Llama 3.1 JSON format: the whole answer is {"name": ..., "parameters": {...}},
// several calls joined by ';'. A call is only known once the answer is whole.
#include <string>

#include "web/chat_format/json_call.h"

namespace spark {
namespace {

// One or more call objects separated by ';'.
bool parse_llama_tool_calls(std::string_view text, std::vector<ToolCall>& calls) {
  std::vector<ToolCall> found;
  size_t i = 0;
  for (;;) {
    while (i < text.size() && (is_space(text[i]) || (text[i] == ';' && !found.empty()))) ++i;
    if (i == text.size()) break;
    if (text[i] != '{') return false;
    size_t end = json_object_end(text, i);
    if (end == std::string_view::npos) return false;
    ToolCall call;
    if (!parse_tool_call_json(text.substr(i, end - i), call)) return false;
    found.push_back(std::move(call));
    i = end;
  }
  if (found.empty()) return false;
  calls = std::move(found);
  return true;
}

// An answer whose first byte is '{' is held whole and read as calls (content when it is
// not); any other answer is content.
class Llama3Answer : public AnswerSplitter {
 public:
  void run(std::string& buf, bool final, std::vector<OutputEvent>& out) override {
    if (mode_ == Mode::OPEN) {
      size_t first = 0;
      while (first < buf.size() && is_space(buf[first])) ++first;
      mode_ = first < buf.size() && buf[first] == '{' ? Mode::CALLS : Mode::CONTENT;
    }
    if (mode_ == Mode::CONTENT) {
      if (!strip_space(buf)) return;
      emit(out, OutputEvent::CONTENT, buf);
      buf.clear();
      return;
    }
    if (!final) return;
    std::vector<ToolCall> calls;
    if (parse_llama_tool_calls(buf, calls)) {
      emit_calls(out, calls);
    } else {
      emit(out, OutputEvent::CONTENT, buf);
    }
    buf.clear();
  }

 private:
  enum class Mode { OPEN, CONTENT, CALLS };
  Mode mode_ = Mode::OPEN;
};

bool contains(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

class Llama3 : public JsonCallFormat {
 public:
  Llama3() : JsonCallFormat({constrain::ToolTrigger::Format::LEADING, "{", "\"name\": \"", "parameters", "}"}) {}

 private:
  const char* name() const override { return "llama3"; }
  bool detect(const TemplateText& text) const override {
    return contains(text.with_tools, "<|python_tag|>") || contains(text.with_tools, "ipython");
  }
  std::unique_ptr<AnswerSplitter> answer_splitter() const override { return std::make_unique<Llama3Answer>(); }
};

}  // namespace

const ChatFormat& llama3_chat_format() {
  static const Llama3 format;
  return format;
}

}  // namespace spark
