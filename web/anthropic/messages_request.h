// messages_request.h — a POST /v1/messages (or /v1/messages/count_tokens) body turned into
// the chat request the engine runs: system and content blocks (text, tool_use, tool_result,
// thinking) become chat messages, tools take the function shape, and the result goes
// through the chat completions parser, so every check is the same.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "web/openai_request.h"

namespace spark {

// Throws HttpError 400 naming the field for what is malformed or unsupported, 404 for an
// unknown model. `count_only` (count_tokens) does not require max_tokens.
ApiRequest parse_messages_request(std::string_view body, int64_t vocab_size, const std::string& model_id,
                                  bool count_only);

}  // namespace spark
