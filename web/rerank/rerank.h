// rerank.h — the scoring routes of a reranker ([model] role = "rerank"): POST /v1/rerank
// and /rerank in the shape vLLM, llama.cpp, Jina and Cohere clients send, and POST
// /v1/score as vLLM defines it.
#pragma once
#include <httplib.h>

#include "web/app.h"

namespace spark {

void handle_rerank(App& app, const httplib::Request& req, httplib::Response& res);
void handle_score(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace spark
