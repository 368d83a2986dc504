// tool_trigger.h — tool calls under tool_choice "auto": the output is free until the model
// opens a call the way its chat format writes one; from there to the call's end every
// token is constrained (a declared function's name, then arguments that match its
// parameters schema), and after the call the output is free again.
//
// The formats, as the output parsers (web/tool_calls.h, web/harmony_parser.h) read them:
//   TAG        Hermes / Qwen: `<tool_call>` anywhere in the text; the rest of the call is
//              `\n{"name": "NAME", "arguments": {...}}\n</tool_call>`.
//   LEADING    Llama 3.1 JSON: the answer's first non-space byte is `{`; the rest is
//              `"name": "NAME", "parameters": {...}}`.
//   HARMONY    gpt-oss: a header naming `to=functions.NAME`, then `<|message|>`; the
//              message is NAME's arguments (the name itself is written in the header,
//              around special tokens the grammar cannot hold, so it is not constrained: a
//              name no tool has leaves its message free).
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
  enum class Format { TAG, LEADING, HARMONY };
  Format format = Format::TAG;
  std::string opening;  // TAG: "<tool_call>"; LEADING: "{"; HARMONY: "to=functions."
  std::shared_ptr<const TokenTable> tokens;
  std::shared_ptr<const Constraint> call;  // TAG, LEADING: the rest of the call
  // HARMONY: each function's arguments.
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
  bool in_name_ = false;      // HARMONY: reading the name after `to=functions.`
  std::string name_;          // HARMONY: the recipient of the message being headed
  bool named_ = false;        // HARMONY: a `to=functions.` header awaits its <|message|>
};

}  // namespace spark::constrain
