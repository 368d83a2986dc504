// responses.h — POST /v1/responses, the OpenAI Responses API (stateless subset plus
// store / previous_response_id): output items (reasoning, message, function_call), whole
// or as the Responses event stream with sequence numbers.
#pragma once
#include <httplib.h>

#include "web/app.h"

namespace spark {

void handle_responses(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace spark
