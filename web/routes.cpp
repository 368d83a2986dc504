// routes.cpp — the route table: method, path, access, and the handler for each endpoint.
#include "web/routes.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "engine/util/version.h"
#include "web/http_error.h"

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
                           {"uptime_s", std::chrono::duration<double>(uptime).count()}}
                .dump());
}

}  // namespace

std::vector<Route> make_routes(App& app) {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  return {
      {"GET", "/health", Access::PUBLIC, false, [&app](Req q, Res r) { health(app, q, r); }},
      {"GET", "/version", Access::PUBLIC, false, [&app](Req q, Res r) { version(app, q, r); }},
  };
}

}  // namespace spark
