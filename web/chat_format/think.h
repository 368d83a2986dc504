// think.h — <think>...</think> reasoning (Qwen3 and its kin): which templates think, whether
// the prompt already opened the reasoning, and the front of every text format's parser,
// which splits the reasoning off and hands the answer to the format's AnswerSplitter.
// Also the scanning helpers the text formats share.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "web/chat_format/chat_format.h"

namespace spark {

// The template writes <think> reasoning, or Gemma 4's thought channel (enable_thinking).
bool template_thinks(const TemplateText& text);
// Whether it thinks when the request does not say (no enable_thinking): <think> templates
// do; Gemma 4's writes an empty thought channel unless enable_thinking is true.
bool template_thinks_unasked(const TemplateText& text);
// The rendered prompt ends by opening <think> (the model's reasoning starts at once).
bool prompt_opens_reasoning(std::string_view prompt_text);

// A format's reading of the answer after any reasoning: content and tool calls.
class AnswerSplitter {
 public:
  virtual ~AnswerSplitter() = default;
  // Once, as the answer begins (buf then holds a non-space byte); after </think> the
  // whitespace before the answer is dropped.
  void begin(bool after_reasoning) { strip_leading_space_ = after_reasoning; }
  // Decides what it can of `buf` (the undecided text), erasing it; final: no more comes.
  virtual void run(std::string& buf, bool final, std::vector<OutputEvent>& out) = 0;

 protected:
  // Drops leading whitespace while asked to; false when nothing else is there yet.
  bool strip_space(std::string& buf);
  bool strip_leading_space_ = false;
};

// Everything is content (no tools offered).
std::unique_ptr<AnswerSplitter> content_only();

// Reasoning first when `reasoning`, then the answer through `answer`.
std::unique_ptr<OutputParser> think_then(const OutputParserOptions& options, std::unique_ptr<AnswerSplitter> answer);

bool is_space(char c);
// The first position at or after `at` that is not space; `s` without its outer space.
size_t skip_space(std::string_view s, size_t at);
std::string_view trim_space(std::string_view s);
// Emits `buf` as `kind` up to `tag`. True when the tag is there whole (it is erased with
// what came before it); false when buf is spent, or ends in what may be the tag's start
// (kept until more text decides it, released when the text is final).
bool emit_until(std::string& buf, std::string_view tag, OutputEvent::Kind kind, bool final,
                std::vector<OutputEvent>& out);
// Appends text of one kind, joining it to the last event when that has the same kind.
void emit(std::vector<OutputEvent>& out, OutputEvent::Kind kind, std::string_view text);
// Appends one TOOL_CALL event per call.
void emit_calls(std::vector<OutputEvent>& out, std::vector<ToolCall>& calls);

}  // namespace spark
