// info_handlers.h — the handlers of /v1/models, /metrics, /tokenize and /detokenize.
#pragma once
#include <httplib.h>

#include <vector>

#include "web/app.h"

namespace spark {

// Every served model, in config order: /v1/models lists each, /metrics labels each one's
// series with its model_name.
void handle_models(const std::vector<App*>& apps, const httplib::Request& req, httplib::Response& res);
void handle_metrics(const std::vector<App*>& apps, const httplib::Request& req, httplib::Response& res);
// vLLM's shapes: {"prompt" | "messages", "add_special_tokens", "add_generation_prompt"}
// -> {"count", "max_model_len", "tokens"}; {"tokens"} -> {"prompt"}.
void handle_tokenize(App& app, const httplib::Request& req, httplib::Response& res);
void handle_detokenize(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace spark
