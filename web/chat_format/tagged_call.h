// tagged_call.h — calls written between <tool_call> and </tool_call>, anywhere in the answer
// (Hermes' JSON object, Qwen3-Coder's XML): the streaming split of the answer into content
// and calls, given how a format reads the text between the tags.
#pragma once
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "web/chat_format/think.h"

namespace spark {

inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";

// Reads one call's body (the text between the tags) into `calls`; false when it is not a
// call, and the body then stays content, tags and all.
using CallBodyReader = std::function<bool(std::string_view body, std::vector<ToolCall>& calls)>;

// Content with calls between the tags. A body still open when the answer ends is read as
// one (it may be whole without its closing tag), else it is content.
std::unique_ptr<AnswerSplitter> tagged_calls(CallBodyReader read);

}  // namespace spark
