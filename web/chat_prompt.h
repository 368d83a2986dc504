// chat_prompt.h — from a parsed chat request to prompt token ids: the model's chat template
// with tools and tool_choice, the forced start of a required tool call, and how the
// answer's text is to be split (reasoning, tool calls).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "web/app.h"
#include "web/chat_format/chat_format.h"
#include "web/openai_request.h"

namespace spark {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> ids;
  // Answer text the prompt already holds (the forced opening of a required tool call);
  // it is parsed as if the model had written it.
  std::string prefill;
  OutputParserOptions parser;
};

// Reads the chat format and whether the model thinks from its chat template.
void detect_model_traits(App& app);

// Throws HttpError 400 when the model has no chat template or the template refuses the
// conversation (its raise_exception text is the message).
ChatPrompt build_chat_prompt(const App& app, const ApiRequest& request);

// The prompt of a request that generates, with the request's decoding set to what the
// answer's parser reads: harmony is read from its special tokens (<|channel|>,
// <|message|>, ...), so they stay in the text whatever the client asked. Every chat route
// (chat completions, Responses, Messages) builds its prompt here.
ChatPrompt build_generation_prompt(const App& app, ApiRequest& request);

}  // namespace spark
