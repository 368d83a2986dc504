// tool_trigger.h — tool calls under tool_choice "auto": the output is free until the model
// opens a call the way its chat format writes one; from there to the call's end every
// token is constrained (a declared function's name, then arguments that match its
// parameters schema), and after the call the output is free again.
//
// Where an opening counts (the chat formats, web/chat_format/, fill in the strings):
//   TAG        anywhere in the text (Hermes / Qwen: `<tool_call>`); `call` is the rest,
//              up to the call's end.
//   LEADING    as the answer's first non-space bytes (Llama 3.1 JSON: `{`).
//   HEADER     a header names the function right after the opening (gpt-oss:
//              `to=functions.NAME`), then `header_end` opens its arguments, held to that
//              function's entry in `arguments` (the name itself is not constrained: a name
//              no tool has leaves the message free).
// The opening is found in the text of the sampled tokens (added tokens such as Qwen's
// <tool_call> by their text), byte by byte; the bytes of the opening token past it are
// the first bytes of the constrained rest.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/constrain/matcher.h"
#include "engine/constrain/token_table.h"

namespace spark::constrain {

struct Constraint;

struct ToolTrigger {
  enum class Format { TAG, LEADING, HEADER };
  Format format = Format::TAG;
  std::string opening;
  std::string header_end;  // HEADER: what closes the header and opens the arguments
  std::shared_ptr<const TokenTable> tokens;
  std::shared_ptr<const Constraint> call;  // TAG, LEADING: the rest of the call
  // HEADER: each function's arguments.
  std::vector<std::pair<std::string, std::shared_ptr<const Constraint>>> arguments;
};

// One sequence's watch over its output.
class ToolCallWatch {
 public:
  explicit ToolCallWatch(std::shared_ptr<const ToolTrigger> trigger);

  // After each output token. `active` is the matcher the token was sampled under (null:
  // free text), already advanced by it; it becomes the one the next token samples under.
  void observe(int32_t token, std::shared_ptr<Matcher>& active);

 private:
  void start(const Constraint& c, std::string_view rest, std::shared_ptr<Matcher>& active);

  std::shared_ptr<const ToolTrigger> trigger_;
  std::string tail_;          // the last bytes of free text, as long as the opening at most
  bool seen_text_ = false;    // LEADING: a non-space byte was written (the answer began)
  bool in_name_ = false;      // HEADER: reading the name after the opening
  std::string name_;          // HEADER: the function the header names
  bool named_ = false;        // HEADER: a named header awaits its end
};

}  // namespace spark::constrain
