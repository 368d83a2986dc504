// openai_response.h — the JSON that /v1/chat/completions and /v1/completions send back,
// whole or as stream chunks, in OpenAI's shapes and key order: choices, messages and
// deltas, tool calls, logprobs (chat and legacy shapes) and usage with cached tokens.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/request_stream.h"
#include "web/chat_format/chat_format.h"

namespace spark {

class Tokenizer;

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// What one choice produced, accumulated over its outputs.
struct ChoiceResult {
  std::string text;        // chat: the content; completions: the text (with echo, the prompt first)
  std::string reasoning;   // chat: reasoning_content
  std::vector<ToolCall> tool_calls;
  std::vector<TokenLogprob> logprobs;
  std::optional<FinishReason> finish;
  std::optional<std::string> stop_string;
};

// "stop" / "length" / "tool_calls" for a finished choice.
std::string finish_reason_text(const ChoiceResult& c);

nlohmann::ordered_json usage_json(const Usage& u);

// {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}
nlohmann::ordered_json chat_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps, int32_t top);
// {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}; offsets
// start at `text_offset` (the length of the text before these tokens).
nlohmann::ordered_json completion_logprobs_json(const Tokenizer& tok, const std::vector<TokenLogprob>& lps,
                                                int32_t top, size_t text_offset);

nlohmann::ordered_json tool_calls_json(const std::vector<ToolCall>& calls);

struct ResponseHead {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// Whole responses. `logprobs` holds each choice's logprobs object (or null).
nlohmann::ordered_json chat_response(const ResponseHead& head, const std::vector<ChoiceResult>& choices,
                                     const std::vector<nlohmann::ordered_json>& logprobs, const Usage& usage);
nlohmann::ordered_json completion_response(const ResponseHead& head, const std::vector<ChoiceResult>& choices,
                                           const std::vector<nlohmann::ordered_json>& logprobs, const Usage& usage);

// Stream chunks. `finish_reason` null while the choice goes on; `usage` is added as null
// on every chunk when the client asked for a usage chunk, as OpenAI does.
nlohmann::ordered_json chat_chunk(const ResponseHead& head, size_t index, nlohmann::ordered_json delta,
                                  nlohmann::ordered_json logprobs, nlohmann::ordered_json finish_reason,
                                  bool with_usage_field);
nlohmann::ordered_json completion_chunk(const ResponseHead& head, size_t index, const std::string& text,
                                        nlohmann::ordered_json logprobs, nlohmann::ordered_json finish_reason,
                                        bool with_usage_field);
// The last chunk of a stream with stream_options.include_usage: no choices, the usage.
nlohmann::ordered_json usage_chunk(const ResponseHead& head, const char* object, const Usage& usage);

// JSON text for the wire: invalid UTF-8 (never expected) is replaced, never thrown on.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace spark
