// completions.h — the handlers of POST /v1/chat/completions and POST /v1/completions:
// parse, build the prompts, run them as a Turn (web/turn.h), answer in OpenAI's shapes.
#pragma once
#include <httplib.h>

#include "web/app.h"

namespace spark {

void handle_chat_completions(App& app, const httplib::Request& req, httplib::Response& res);
void handle_completions(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace spark
