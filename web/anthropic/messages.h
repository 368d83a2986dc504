// messages.h — POST /v1/messages (Anthropic's Messages API: content blocks text, thinking
// and tool_use, whole or as Anthropic's event stream) and POST /v1/messages/count_tokens.
#pragma once
#include <httplib.h>

#include "web/app.h"

namespace spark {

void handle_messages(App& app, const httplib::Request& req, httplib::Response& res);
void handle_count_tokens(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace spark
