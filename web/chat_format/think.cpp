// think.cpp — the reasoning front of the text formats' parsers, and their shared scanning.
#include "web/chat_format/think.h"

#include <algorithm>

namespace spark {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

bool contains(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

// Where `tag` starts in buf, or where a suffix of buf that is a proper prefix of `tag`
// starts (partial = true), or npos.
size_t find_tag(std::string_view buf, std::string_view tag, bool& partial) {
  partial = false;
  size_t pos = buf.find(tag);
  if (pos != std::string_view::npos) return pos;
  for (size_t len = std::min(tag.size() - 1, buf.size()); len > 0; --len)
    if (buf.substr(buf.size() - len) == tag.substr(0, len)) {
      partial = true;
      return buf.size() - len;
    }
  return std::string_view::npos;
}

class ContentOnly : public AnswerSplitter {
  void run(std::string& buf, bool final, std::vector<OutputEvent>& out) override {
    if (!strip_space(buf)) return;
    emit(out, OutputEvent::CONTENT, buf);
    buf.clear();
  }
};

class ThinkParser : public OutputParser {
 public:
  ThinkParser(const OutputParserOptions& options, std::unique_ptr<AnswerSplitter> answer)
      : reasoning_(options.reasoning), answer_(std::move(answer)) {
    if (options.reasoning && options.starts_in_reasoning) mode_ = Mode::REASONING;
  }

 private:
  enum class Mode { START, REASONING, ANSWER };

  std::vector<OutputEvent> on_push(std::string_view delta) override {
    std::vector<OutputEvent> out;
    buf_.append(delta);
    run(out, false);
    return out;
  }
  std::vector<OutputEvent> on_finish(bool) override {
    std::vector<OutputEvent> out;
    run(out, true);
    return out;
  }

  void run(std::vector<OutputEvent>& out, bool final) {
    for (;;) {
      switch (mode_) {
        case Mode::START: {
          size_t first = 0;
          while (first < buf_.size() && is_space(buf_[first])) ++first;
          if (first == buf_.size()) {
            if (!final) return;
            buf_.clear();  // only whitespace: nothing to say
            return;
          }
          std::string_view rest = std::string_view(buf_).substr(first);
          if (reasoning_) {
            if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
              buf_.erase(0, first + kThinkOpen.size());
              mode_ = Mode::REASONING;
              continue;
            }
            if (!final && rest.size() < kThinkOpen.size() && kThinkOpen.substr(0, rest.size()) == rest) return;
          }
          answer_->begin(after_reasoning_);
          mode_ = Mode::ANSWER;
          continue;
        }
        case Mode::REASONING: {
          if (!emit_until(buf_, kThinkClose, OutputEvent::REASONING, final, out)) return;
          mode_ = Mode::START;  // the answer may still open with a Llama JSON call
          reasoning_ = false;
          after_reasoning_ = true;
          continue;
        }
        case Mode::ANSWER:
          answer_->run(buf_, final, out);
          return;
      }
    }
  }

  bool reasoning_;
  Mode mode_ = Mode::START;
  std::string buf_;  // undecided text
  bool after_reasoning_ = false;
  std::unique_ptr<AnswerSplitter> answer_;
};

}  // namespace

bool template_thinks(const TemplateText& text) {
  // Gemma 4 thinks in its thought channel, when enable_thinking asks it to.
  auto channel = [](const std::string& t) { return contains(t, "<|channel>thought") && contains(t, "enable_thinking"); };
  return template_thinks_unasked(text) || channel(text.without_tools) || channel(text.with_tools);
}

bool template_thinks_unasked(const TemplateText& text) {
  return contains(text.without_tools, kThinkOpen) || contains(text.with_tools, kThinkOpen);
}

bool prompt_opens_reasoning(std::string_view prompt_text) {
  std::string_view tail = prompt_text.substr(prompt_text.size() - std::min<size_t>(prompt_text.size(), 16));
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.remove_suffix(1);
  return tail.size() >= kThinkOpen.size() && tail.substr(tail.size() - kThinkOpen.size()) == kThinkOpen;
}

bool AnswerSplitter::strip_space(std::string& buf) {
  if (!strip_leading_space_) return true;
  size_t first = 0;
  while (first < buf.size() && is_space(buf[first])) ++first;
  buf.erase(0, first);
  if (buf.empty()) return false;
  strip_leading_space_ = false;
  return true;
}

std::unique_ptr<AnswerSplitter> content_only() { return std::make_unique<ContentOnly>(); }

std::unique_ptr<OutputParser> think_then(const OutputParserOptions& options, std::unique_ptr<AnswerSplitter> answer) {
  return std::make_unique<ThinkParser>(options, std::move(answer));
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_space(std::string_view s, size_t at) {
  while (at < s.size() && is_space(s[at])) ++at;
  return at;
}

std::string_view trim_space(std::string_view s) {
  s.remove_prefix(skip_space(s, 0));
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool emit_until(std::string& buf, std::string_view tag, OutputEvent::Kind kind, bool final,
                std::vector<OutputEvent>& out) {
  bool partial = false;
  size_t pos = find_tag(buf, tag, partial);
  if (pos == std::string::npos || (partial && final)) {
    emit(out, kind, buf);
    buf.clear();
    return false;
  }
  emit(out, kind, std::string_view(buf).substr(0, pos));
  if (partial) {
    buf.erase(0, pos);
    return false;
  }
  buf.erase(0, pos + tag.size());
  return true;
}

void emit(std::vector<OutputEvent>& out, OutputEvent::Kind kind, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind && kind != OutputEvent::TOOL_CALL) {
    out.back().text.append(text);
    return;
  }
  OutputEvent e;
  e.kind = kind;
  e.text = std::string(text);
  out.push_back(std::move(e));
}

void emit_calls(std::vector<OutputEvent>& out, std::vector<ToolCall>& calls) {
  for (auto& call : calls) {
    OutputEvent e;
    e.kind = OutputEvent::TOOL_CALL;
    e.call = std::move(call);
    out.push_back(std::move(e));
  }
}

}  // namespace spark
