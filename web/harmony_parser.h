// harmony_parser.h — splits gpt-oss's harmony-format output, as it streams, into OpenAI's
// reasoning_content (the analysis channel), content (final, and commentary addressed to
// no one) and tool_calls (messages addressed to=functions.NAME). Output that is not
// harmony, or that breaks off, is returned as content: nothing the model wrote is lost.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "web/tool_calls.h"

namespace spark {

// The text must carry harmony's special tokens (<|channel|>, <|message|>, <|end|>, ...)
// as they decode; the prompt ends with "<|start|>assistant", so the output begins with a
// message header. Push deltas in order, then finish() once; linear in the text.
class HarmonyParser {
 public:
  std::vector<OutputEvent> push(std::string_view delta);
  // stopped: the answer ended on a stop token (<|return|>, <|call|>) that generation does
  // not hand on as text, so the open message is whole (a call is a call); otherwise it
  // was cut off.
  std::vector<OutputEvent> finish(bool stopped = false);

 private:
  enum class Mode { HEADER, BODY, EXPECT_START, RAW };
  void run(std::vector<OutputEvent>& out, bool final, bool stopped = false);
  void open_body(std::string_view header);
  void emit_body(std::vector<OutputEvent>& out, std::string_view text);
  void end_body(std::vector<OutputEvent>& out, bool complete);

  Mode mode_ = Mode::HEADER;
  std::string buf_;         // undecided text
  bool first_header_ = true;
  OutputEvent::Kind body_kind_ = OutputEvent::CONTENT;
  bool body_is_call_ = false;
  std::string call_name_, call_args_;
};

}  // namespace spark
