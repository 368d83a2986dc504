// openai_framer.h — what chat completions and completions stream alike: the usage chunk
// (when asked for) and [DONE] at the end, an error event and [DONE] on failure.
#pragma once
#include <string>
#include <utility>

#include "web/openai_response.h"
#include "web/sse.h"
#include "web/turn.h"

namespace spark {

class OpenAiFramer : public TurnFramer {
 public:
  OpenAiFramer(ResponseHead head, const char* chunk_object) : head_(std::move(head)), chunk_object_(chunk_object) {}

  void close(const Turn& turn, std::string* sse) override {
    if (!sse) return;
    if (turn.request().include_usage) *sse += sse_event(usage_chunk(head_, chunk_object_, turn.usage()));
    *sse += kSseDone;
  }
  void fail(const Turn&, const HttpError& error, std::string& sse) override {
    sse += sse_event(error_body(error.status, error.what(), error.type));
    sse += kSseDone;
  }

 protected:
  ResponseHead head_;
  const char* chunk_object_;  // "chat.completion.chunk" or "text_completion"
};

}  // namespace spark
