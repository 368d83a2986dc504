// embeddings.h — POST /v1/embeddings as OpenAI defines it, served by an embedder
// ([model] role = "embed").
#pragma once
#include <httplib.h>

#include "web/app.h"

namespace spark {

void handle_embeddings(App& app, const httplib::Request& req, httplib::Response& res);

}  // namespace spark
