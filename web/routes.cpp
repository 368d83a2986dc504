// routes.cpp — the route table: method, path, access, and the handler for each endpoint.
#include "web/routes.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "engine/util/version.h"
#include "web/anthropic/messages.h"
#include "web/openai/completions.h"
#include "web/openai/embeddings.h"
#include "web/rerank/rerank.h"
#include "web/dashboard/dashboard.h"
#include "web/http_error.h"
#include "web/info_handlers.h"
#include "web/openai/responses.h"

namespace spark {
namespace {

void health(App& app, const httplib::Request&, httplib::Response& res) {
  std::string problem = app.state.problem();
  if (!problem.empty()) {
    send_json(res, 503, error_body(503, problem, "service_unavailable_error").dump());
    return;
  }
  send_json(res, 200, nlohmann::json{{"status", "ok"}}.dump());
}

void version(App& app, const httplib::Request&, httplib::Response& res) {
  auto uptime = std::chrono::steady_clock::now() - app.state.started();
  send_json(res, 200,
            nlohmann::json{{"version", version_number()},
                           {"build", version_string()},
                           {"cuda", bool(SPARKD_CUDA)},
                           {"replica", app.http.replica()},
                           {"uptime_s", std::chrono::duration<double>(uptime).count()}}
                .dump());
}

}  // namespace

std::vector<Route> make_routes(ModelRouter& router) {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  App& app = router.first();  // the serving state and the HTTP server are every model's
  const std::vector<App*>& apps = router.apps();
  std::vector<Route> routes = {
      {"GET", "/health", Access::PUBLIC, false, [&app](Req q, Res r) { health(app, q, r); }},
      {"GET", "/version", Access::PUBLIC, false, [&app](Req q, Res r) { version(app, q, r); }},
      {"GET", "/metrics", Access::DASHBOARD, false, [&apps](Req q, Res r) { handle_metrics(apps, q, r); }},
      {"GET", "/v1/models", Access::API_KEY, false, [&apps](Req q, Res r) { handle_models(apps, q, r); }},
      {"POST", "/v1/chat/completions", Access::API_KEY, true, router.route("chat", handle_chat_completions)},
      {"POST", "/v1/completions", Access::API_KEY, true, router.route("chat", handle_completions)},
      {"POST", "/v1/responses", Access::API_KEY, true, router.route("chat", handle_responses)},
      {"POST", "/v1/messages", Access::API_KEY, true, router.route("chat", handle_messages), ErrorShape::ANTHROPIC},
      {"POST", "/v1/messages/count_tokens", Access::API_KEY, true, router.route("chat", handle_count_tokens),
       ErrorShape::ANTHROPIC},
      {"POST", "/v1/embeddings", Access::API_KEY, true, router.route("embed", handle_embeddings)},
      {"POST", "/v1/rerank", Access::API_KEY, true, router.route("rerank", handle_rerank)},
      {"POST", "/rerank", Access::API_KEY, true, router.route("rerank", handle_rerank)},
      {"POST", "/v1/score", Access::API_KEY, true, router.route("rerank", handle_score)},
      // Any model tokenizes: without a "model", the first one's tokenizer answers.
      {"POST", "/tokenize", Access::API_KEY, true, router.route("", handle_tokenize)},
      {"POST", "/detokenize", Access::API_KEY, true, router.route("", handle_detokenize)},
  };
  // The dashboard shows the first model (its requests, engine and plan).
  for (auto& r : dashboard_routes(app, apps)) routes.push_back(std::move(r));
  return routes;
}

}  // namespace spark
