// tool_calls.h — splits a chat model's output text, as it streams, into reasoning,
// content and tool calls: Qwen3 <think>...</think>, Qwen/Hermes <tool_call>{json}</tool_call>
// and Llama 3.1 JSON calls. A linear-time state machine; no regular expressions.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace spark {

enum class ToolFormat {
  NONE,    // no tools offered: everything after reasoning is content
  HERMES,  // <tool_call>{"name": ..., "arguments": {...}}</tool_call>, anywhere in the text
  LLAMA3,  // the whole answer is {"name": ..., "parameters": {...}} (several joined by ';')
};

struct ToolCall {
  std::string id;         // "call_" + 24 random characters
  std::string name;
  std::string arguments;  // a JSON text (an object), as OpenAI sends it
};

struct OutputEvent {
  enum Kind { CONTENT, REASONING, TOOL_CALL } kind = CONTENT;
  std::string text;  // CONTENT / REASONING
  ToolCall call;     // TOOL_CALL
};

struct OutputParserOptions {
  ToolFormat tools = ToolFormat::NONE;
  bool reasoning = false;          // the model thinks: <think>...</think> is reasoning
  bool starts_in_reasoning = false;  // the prompt already opened <think>
  bool harmony = false;  // gpt-oss's harmony messages (harmony_parser.h) instead of all the above
};

class HarmonyParser;

// Push text deltas in order, then finish() once. Text that may still turn out to be the
// start of a tag is held back until it is decided; each byte is examined a bounded number
// of times, so hostile output costs time linear in its length.
class OutputParser {
 public:
  explicit OutputParser(OutputParserOptions options);
  ~OutputParser();
  std::vector<OutputEvent> push(std::string_view delta);
  // stopped: the model ended its answer with a stop token (harmony's <|return|> or
  // <|call|>, which generation does not hand on as text), so an open message is whole.
  std::vector<OutputEvent> finish(bool stopped = false);
  size_t num_tool_calls() const { return num_calls_; }

 private:
  enum class Mode { START, REASONING, CONTENT, TOOL, LLAMA_JSON };
  void run(std::vector<OutputEvent>& out, bool final);
  void emit(std::vector<OutputEvent>& out, OutputEvent::Kind kind, std::string_view text);
  void end_tool_body(std::vector<OutputEvent>& out, size_t body_len, bool closed);

  OutputParserOptions opt_;
  Mode mode_ = Mode::START;
  std::string buf_;           // undecided text
  size_t scanned_ = 0;        // bytes of buf_ already searched for the closing tag (TOOL)
  bool strip_leading_ws_ = false;  // drop whitespace right after </think> or a tool call
  bool any_content_ = false;  // content was emitted (Llama JSON calls must come first)
  size_t num_calls_ = 0;
  std::unique_ptr<HarmonyParser> harmony_;
};

// Parses one tool-call JSON object ({"name", "arguments"|"parameters"}); false when the
// text is not one (the caller then keeps it as content).
bool parse_tool_call_json(std::string_view text, ToolCall& call);
// Parses a Llama 3.1 answer: one or more call objects separated by ';'.
bool parse_llama_tool_calls(std::string_view text, std::vector<ToolCall>& calls);
std::string new_tool_call_id();

// Nesting depth of a JSON text ([ and { outside strings), scanning linearly and stopping
// early past `limit`; used to refuse depth bombs before building a tree.
size_t json_depth(std::string_view text, size_t limit);

}  // namespace spark
