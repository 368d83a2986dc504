// responses_request.h — a POST /v1/responses body turned into the chat request the engine
// runs: input items become chat messages (after the stored conversation that
// previous_response_id names), function tools and tool_choice take the chat shapes, and the
// result goes through the chat completions parser, so every check is the same.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "web/openai/response_store.h"
#include "web/openai_request.h"

namespace spark {

struct ResponsesRequest {
  ApiRequest chat;                                 // what runs
  nlohmann::ordered_json body;                     // the request as given (its settings are echoed back)
  nlohmann::ordered_json new_messages;             // this turn's input as chat messages (kept when stored)
  std::shared_ptr<const StoredResponse> previous;  // previous_response_id's turn, or null
  bool store = true;
};

// Throws HttpError: 400 naming the field for what is malformed or unsupported, 404 for an
// unknown model or previous_response_id.
ResponsesRequest parse_responses_request(std::string_view body, const ResponseStore& store, int64_t vocab_size,
                                         const std::string& model_id);

}  // namespace spark
