// info_handlers.h — the handlers of /v1/models, /metrics, /tokenize and /detokenize.
#pragma once
#include <httplib.h>

#include "web/app.h"

namespace spark {

void handle_models(App& app, const httplib::Request& req, httplib::Response& res);
void handle_metrics(App& app, const httplib::Request& req, httplib::Response& res);
// vLLM's shapes: {"prompt" | "messages", "add_special_tokens", "add_generation_prompt"}
// -> {"count", "max_model_len", "tokens"}; {"tokens"} -> {"prompt"}.
void handle_tokenize(App& app, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace spark
