// server.h — the HTTP server: one route table, one wrapper that turns every exception into
// an OpenAI-shaped error, API-key checks, body and connection limits, drain behaviour.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/config.h"
#include "web/server_state.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace spark {

enum class Access {
  PUBLIC,   // never asks for a key (/health, /version)
  API_KEY,  // needs a key when keys are configured
  DASHBOARD // public unless server.dashboard_auth = "api_key"
};

// The shape of the error bodies a route sends: OpenAI's, or Anthropic's on /v1/messages.
enum class ErrorShape { OPENAI, ANTHROPIC };

struct Route {
  std::string method;   // "GET", "POST"
  std::string pattern;  // exact path or an httplib regex
  Access access = Access::API_KEY;
  bool refused_while_draining = true;  // new work gets 503 while draining
  std::function<void(const httplib::Request&, httplib::Response&)> handler;
  ErrorShape errors = ErrorShape::OPENAI;
};

class HttpServer {
 public:
  HttpServer(const ServerConfig& config, ServerState& state);
  ~HttpServer();
  void add_routes(const std::vector<Route>& routes);
  // Binds server.host:server.port (port 0 picks a free one); returns the bound port.
  int bind();
  // Serves on a thread of its own until stop(), which stops listening and joins it (at
  // once after start() too; a second stop() does nothing).
  void start();
  void stop();
  bool key_ok(const httplib::Request& req) const;
  // Which replica of a fleet this is: server.replica_name, else the hostname. Every
  // response carries it in X-Sparkd-Replica, and /metrics labels every sample with it.
  const std::string& replica() const { return replica_; }

 private:
  void wrap(const Route& route, const httplib::Request& req, httplib::Response& res) const;
  // The error shape of the route a path belongs to (OpenAI's when none matches).
  ErrorShape errors_of(const std::string& path) const;
  const ServerConfig& config_;
  ServerState& state_;
  std::vector<std::string> api_keys_;
  std::string replica_;
  std::vector<Route> routes_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::atomic<bool> serving_done_{false};
};

// Writes a JSON body (and the status) to the response.
void send_json(httplib::Response& res, int status, const std::string& json_text);

}  // namespace spark
