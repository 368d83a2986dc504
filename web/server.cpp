// server.cpp — cpp-httplib setup, the error wrapper, API keys, CORS and limits.
#include "web/server.h"

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <unistd.h>

#include "engine/util/check.h"
#include "engine/util/log.h"
#include "web/connection.h"
#include "web/http_error.h"

namespace spark {
namespace {

constexpr int64_t kMinWorkerCap = 1024;

// Compares in time that depends only on the lengths, so a timing attacker learns nothing
// about how much of a key matched.
bool constant_time_equal(const std::string& a, const std::string& b) {
  size_t n = std::max(a.size(), b.size());
  unsigned diff = unsigned(a.size() != b.size());
  for (size_t i = 0; i < n; ++i)
    diff |= unsigned((i < a.size() ? a[i] : 0) ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

std::vector<std::string> read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("[server] api_key_file = \"" + path + "\": cannot read the file");
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    keys.push_back(line.substr(start));
  }
  if (keys.empty()) throw InputError("[server] api_key_file = \"" + path + "\": holds no keys");
  return keys;
}

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& type = "",
                const std::string& param = "", const std::string& code = "", ErrorShape shape = ErrorShape::OPENAI) {
  nlohmann::json body = shape == ErrorShape::ANTHROPIC ? anthropic_error_body(status, message)
                                                       : error_body(status, message, type, param, code);
  send_json(res, status, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "sparkd";
  return name;
}

}  // namespace

void send_json(httplib::Response& res, int status, const std::string& json_text) {
  res.status = status;
  res.set_content(json_text, "application/json");
}

HttpServer::HttpServer(const ServerConfig& config, ServerState& state)
    : config_(config),
      state_(state),
      api_keys_(config.api_keys),
      replica_(config.replica_name.empty() ? hostname() : config.replica_name),
      http_(std::make_unique<httplib::Server>()) {
  if (!config.api_key_file.empty())
    for (auto& k : read_key_file(config.api_key_file)) api_keys_.push_back(std::move(k));

  // Each open connection holds a worker for its whole keep-alive life, so the pool grows
  // with them: max_num_seqs open streams, queued requests and idle clients never starve
  // /health, /metrics or the dashboard. The cap only bounds a flood.
  size_t workers = size_t(std::max<int64_t>(config.max_queued_requests + 256, kMinWorkerCap));
  http_->new_task_queue = [workers] { return new GrowingTaskQueue(workers); };
  http_->set_payload_max_length(size_t(config.max_body_bytes));
  // A body trickled slowly, or a client that stops reading, cannot hold a worker forever.
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  http_->set_keep_alive_max_count(1000);
  // An idle keep-alive connection holds its worker this long; clients reconnect cheaply.
  http_->set_keep_alive_timeout(5);
  // A reply is written as its headers, then its body: with Nagle's algorithm the body waits
  // for the client to acknowledge the headers, which a keep-alive client delays by ~40 ms
  // (delayed ACK), on every non-streamed reply.
  http_->set_tcp_nodelay(true);

  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler already wrote an error body
    if (res.status == 404) {
      for (const auto& r : routes_)
        if (r.method != req.method && std::regex_match(req.path, std::regex(r.pattern))) {
          send_error(res, 405, "method " + req.method + " is not allowed on " + req.path + "; use " + r.method, "", "",
                     "", r.errors);
          return;
        }
      send_error(res, 404, "no route " + req.method + " " + req.path);
    } else if (res.status == 413) {
      send_error(res, 413, "request body is larger than server.max_body_bytes (" +
                               std::to_string(config_.max_body_bytes) + " bytes)", "", "", "", errors_of(req.path));
    } else {
      send_error(res, res.status, "request failed with status " + std::to_string(res.status), "", "", "",
                 errors_of(req.path));
    }
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, 500, "internal error");
  });
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Behind a load balancer, the client (and a test) can see which replica answered.
    res.set_header("X-Sparkd-Replica", replica_);
    if (auto origin = req.get_header_value("Origin"); !origin.empty())
      for (const auto& allowed : config_.cors_origins)
        if (allowed == "*" || allowed == origin) {
          res.set_header("Access-Control-Allow-Origin", allowed == "*" ? "*" : origin);
          res.set_header("Vary", "Origin");
          if (req.method == "OPTIONS") {
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers",
                           "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
            res.status = 204;
            return httplib::Server::HandlerResponse::Handled;
          }
        }
    // cpp-httplib would read (and discard) a too-large body before answering; a client
    // that declares 10 GB and sends nothing would hold the worker until the read timeout.
    // The declared length is known here, before any body byte is read.
    if (req.has_header("Content-Length")) {
      const std::string declared = req.get_header_value("Content-Length");
      char* end = nullptr;
      unsigned long long length = std::strtoull(declared.c_str(), &end, 10);
      if (end != declared.c_str() && *end == '\0' && length > uint64_t(config_.max_body_bytes)) {
        send_error(res, 413, "request body is larger than server.max_body_bytes (" +
                                 std::to_string(config_.max_body_bytes) + " bytes)", "", "", "", errors_of(req.path));
        res.set_header("Connection", "close");  // the unread body must not be parsed as a request
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
}

HttpServer::~HttpServer() { stop(); }

ErrorShape HttpServer::errors_of(const std::string& path) const {
  for (const auto& r : routes_)
    if (r.errors != ErrorShape::OPENAI && std::regex_match(path, std::regex(r.pattern))) return r.errors;
  return ErrorShape::OPENAI;
}

bool HttpServer::key_ok(const httplib::Request& req) const {
  if (api_keys_.empty()) return true;
  // Anthropic's clients send the key as x-api-key; OpenAI's as a bearer token.
  std::string given = req.get_header_value("x-api-key");
  std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (given.empty() && auth.rfind(prefix, 0) != 0) return false;
  if (given.empty()) given = auth.substr(prefix.size());
  bool ok = false;
  for (const auto& k : api_keys_) ok |= constant_time_equal(given, k);  // no early exit
  return ok;
}

void HttpServer::wrap(const Route& route, const httplib::Request& req, httplib::Response& res) const {
  try {
    bool needs_key = route.access == Access::API_KEY ||
                     (route.access == Access::DASHBOARD && config_.dashboard_auth == "api_key");
    if (needs_key && !key_ok(req))
      throw HttpError(401, "missing or invalid API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
                      "authentication_error", "", "invalid_api_key");
    if (route.refused_while_draining) {
      ServeStatus s = state_.status();
      if (s != ServeStatus::READY)
        throw HttpError(503, "server is not serving: " + state_.reason(), "service_unavailable_error");
    }
    route.handler(req, res);
  } catch (const HttpError& e) {
    send_error(res, e.status, e.what(), e.type, e.param, e.code, route.errors);
  } catch (const InputError& e) {
    send_error(res, 400, e.what(), "", "", "", route.errors);
  } catch (const std::exception& e) {
    log_error("handler for ", req.method, " ", req.path, " failed: ", e.what());
    send_error(res, 500, std::string("internal error: ") + e.what(), "", "", "", route.errors);
  }
}

void HttpServer::add_routes(const std::vector<Route>& routes) {
  for (const auto& r : routes) {
    routes_.push_back(r);
    auto handler = [this, r](const httplib::Request& req, httplib::Response& res) { wrap(r, req, res); };
    if (r.method == "GET") http_->Get(r.pattern, handler);
    else if (r.method == "POST") http_->Post(r.pattern, handler);
    else if (r.method == "DELETE") http_->Delete(r.pattern, handler);
    else SPARK_CHECK(false, "unsupported method " + r.method);
  }
}

int HttpServer::bind() {
  int port = config_.port == 0 ? http_->bind_to_any_port(config_.host)
                               : (http_->bind_to_port(config_.host, int(config_.port)) ? int(config_.port) : -1);
  if (port < 0)
    throw RuntimeError("cannot listen on " + config_.host + ":" + std::to_string(config_.port) +
                       " (in use, or not an address of this machine)");
  return port;
}

void HttpServer::start() {
  thread_ = std::thread([this] {
    http_->listen_after_bind();
    serving_done_ = true;
  });
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  // httplib's stop() shuts a listener that is already running and is lost before that: a
  // stop right after start() (a model that fails to load at once) would leave the thread
  // serving forever. So it waits for the listener first (once only: a second stop() while
  // the listener winds down trips httplib's assertion).
  while (!http_->is_running() && !serving_done_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();
  thread_.join();
}

}  // namespace spark
