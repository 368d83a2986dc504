// bench_client.cpp — the benchmark's HTTP client: discovery, /tokenize, streamed requests.
#include "web/bench/bench_client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>

#include "engine/util/check.h"

namespace spark {

BenchTarget parse_target(const std::string& url, const std::string& api_key, double timeout_s) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) throw InputError("--url must start with http:// or https://, got '" + url + "'");
  std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https")
    throw InputError("--url must start with http:// or https://, got '" + url + "'");
  size_t host_begin = scheme_end + 3;
  size_t path_begin = url.find('/', host_begin);
  std::string host_port =
      url.substr(host_begin, path_begin == std::string::npos ? std::string::npos : path_begin - host_begin);
  if (host_port.empty()) throw InputError("--url has no host: '" + url + "'");
  if (host_port.find_first_of("?#@ ") != std::string::npos)
    throw InputError("--url must be scheme://host[:port][/path], got '" + url + "'");
  BenchTarget t;
  t.origin = scheme + "://" + host_port;
  t.base_path = path_begin == std::string::npos ? "" : url.substr(path_begin);
  while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
  // People paste the OpenAI base URL (".../v1"); the endpoints below add /v1 themselves.
  if (t.base_path.size() >= 3 && t.base_path.compare(t.base_path.size() - 3, 3, "/v1") == 0)
    t.base_path.resize(t.base_path.size() - 3);
  t.api_key = api_key;
  t.timeout_s = timeout_s;
  return t;
}

nlohmann::json request_body(BenchEndpoint endpoint, const std::string& model, const BenchPrompt& prompt,
                            long long max_tokens) {
  nlohmann::json body = {{"model", model},     {"max_tokens", prompt.max_tokens.value_or(max_tokens)},
                         {"stream", true},     {"stream_options", {{"include_usage", true}}},
                         {"ignore_eos", true}, {"temperature", 0.0}};
  if (endpoint == BenchEndpoint::CHAT) {
    body["messages"] = prompt.messages.is_array()
                           ? prompt.messages
                           : nlohmann::json::array({{{"role", "user"}, {"content", prompt.text}}});
  } else {
    body["prompt"] = prompt.text;
  }
  return body;
}

namespace {

const char* endpoint_path(BenchEndpoint e) {
  return e == BenchEndpoint::CHAT ? "/v1/chat/completions" : "/v1/completions";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

BenchClient::BenchClient(const BenchTarget& target) : target_(target) {
  http_ = std::make_unique<httplib::Client>(target_.origin);
  if (!http_->is_valid()) throw InputError("cannot use --url " + target_.origin);
  auto whole = [](double s) { return time_t(std::max(1.0, s)); };
  http_->set_keep_alive(true);
  http_->set_tcp_nodelay(true);
  http_->set_connection_timeout(whole(std::min(target_.timeout_s, 30.0)));
  // A silent server ends the read after the request's whole allowance at most.
  http_->set_read_timeout(whole(target_.timeout_s));
  http_->set_write_timeout(whole(target_.timeout_s));
  httplib::Headers headers = {{"Accept-Encoding", "identity"}};  // compressed SSE would arrive in bursts
  if (!target_.api_key.empty()) headers.emplace("Authorization", "Bearer " + target_.api_key);
  http_->set_default_headers(headers);
}

BenchClient::~BenchClient() = default;

std::string BenchClient::first_model() {
  auto res = http_->Get(target_.base_path + "/v1/models");
  if (!res)
    throw RuntimeError("GET " + target_.origin + target_.base_path +
                       "/v1/models failed: " + httplib::to_string(res.error()));
  if (res->status != 200)
    throw RuntimeError("GET /v1/models answered " + std::to_string(res->status) + ": " +
                       error_message_from_body(res->body) + " (pass --model)");
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array())
    for (const auto& m : j["data"])
      if (m.is_object() && m.contains("id") && m["id"].is_string()) return m["id"].get<std::string>();
  throw RuntimeError("GET /v1/models listed no model id (pass --model)");
}

std::string BenchClient::metrics_text() {
  auto res = http_->Get(target_.base_path + "/metrics");
  return res && res->status == 200 ? res->body : std::string();
}

std::optional<long long> BenchClient::try_tokenize(const nlohmann::json& body, bool count_field) {
  auto res = http_->Post(target_.base_path + "/tokenize", body.dump(), "application/json");
  if (!res || res->status != 200) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  if (count_field && j.contains("count") && j["count"].is_number_integer()) return j["count"].get<long long>();
  if (j.contains("tokens") && j["tokens"].is_array()) return (long long)j["tokens"].size();
  return std::nullopt;
}

std::optional<long long> BenchClient::count_tokens(const std::string& model, const std::string& text) {
  // Special tokens are counted because the completion endpoints add them too.
  auto prompt_style = [&] { return try_tokenize({{"model", model}, {"prompt", text}}, true); };
  auto content_style = [&] { return try_tokenize({{"content", text}, {"add_special", true}}, false); };
  switch (tokenize_style_) {
    case TokenizeStyle::PROMPT:
      return prompt_style();
    case TokenizeStyle::CONTENT:
      return content_style();
    case TokenizeStyle::NONE:
      return std::nullopt;
    case TokenizeStyle::UNKNOWN:
      break;
  }
  // A non-empty text has at least one token: a server that answers 0 read another field.
  if (auto n = prompt_style(); n && *n > 0) {
    tokenize_style_ = TokenizeStyle::PROMPT;
    return n;
  }
  if (auto n = content_style(); n && *n > 0) {
    tokenize_style_ = TokenizeStyle::CONTENT;
    return n;
  }
  tokenize_style_ = TokenizeStyle::NONE;
  return std::nullopt;
}

RequestRecord BenchClient::stream(BenchEndpoint endpoint, const std::string& body, const std::atomic<bool>& cancel) {
  RequestRecord rec;
  CompletionStreamReader reader;
  std::string error_body;
  bool timed_out = false;

  httplib::Request req;
  req.method = "POST";
  req.path = target_.base_path + endpoint_path(endpoint);
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.body = body;
  auto t0 = std::chrono::steady_clock::now();
  req.response_handler = [&](const httplib::Response& r) {
    rec.http_status = r.status;
    return !cancel.load();
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    double t = seconds_since(t0);
    if (cancel.load()) return false;
    if (t > target_.timeout_s) {
      timed_out = true;
      return false;
    }
    if (rec.http_status != 200) {
      if (error_body.size() < 65536) error_body.append(data, n);
      return true;
    }
    return reader.feed(std::string_view(data, n), t);
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  http_->send(req, res, err);
  rec.e2e_s = seconds_since(t0);

  const auto& times = reader.token_times();
  rec.content_chunks = times.size();
  if (!times.empty()) rec.ttft_s = times.front();
  for (size_t i = 1; i < times.size(); ++i) rec.itl_s.push_back(times[i] - times[i - 1]);
  if (auto n = reader.usage_prompt_tokens()) {
    rec.prompt_tokens = *n;
    rec.prompt_tokens_from_usage = true;
  }
  rec.cached_tokens = reader.usage_cached_tokens();
  if (auto n = reader.usage_completion_tokens()) {
    rec.output_tokens = *n;
    rec.output_tokens_from_usage = true;
  } else {
    rec.output_tokens = (long long)times.size();
  }

  auto fail = [&](ErrorKind kind, std::string message) {
    rec.success = false;
    rec.error_kind = kind;
    rec.error = std::move(message);
    return rec;
  };
  if (cancel.load()) return fail(ErrorKind::CANCELLED, "the run was interrupted");
  if (timed_out || ((err == httplib::Error::Read || err == httplib::Error::ConnectionTimeout) &&
                    rec.e2e_s >= target_.timeout_s * 0.99))
    return fail(ErrorKind::TIMEOUT, "no complete response within " + std::to_string(int(target_.timeout_s)) + " s");
  switch (err) {
    case httplib::Error::Success:
    case httplib::Error::Canceled:
    case httplib::Error::Read:
      break;
    case httplib::Error::Connection:
    case httplib::Error::ConnectionTimeout:
    case httplib::Error::BindIPAddress:
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLLoadingCerts:
    case httplib::Error::SSLServerVerification:
      return fail(ErrorKind::CONNECT, httplib::to_string(err));
    default:
      return fail(ErrorKind::OTHER, httplib::to_string(err));
  }
  if (rec.http_status == 0) return fail(ErrorKind::STREAM_CUT, "the connection closed before a response");
  if (rec.http_status != 200) {
    std::string message = "HTTP " + std::to_string(rec.http_status) + ": " + error_message_from_body(error_body);
    if (rec.http_status >= 500) return fail(ErrorKind::HTTP_5XX, message);
    if (rec.http_status >= 400) return fail(ErrorKind::HTTP_4XX, message);
    return fail(ErrorKind::OTHER, message);
  }
  if (reader.error_kind() != ErrorKind::NONE) return fail(reader.error_kind(), reader.error_message());
  if (reader.saw_done()) {
    rec.success = true;  // whatever happened to the connection after [DONE] does not matter
    return rec;
  }
  if (err == httplib::Error::Read) return fail(ErrorKind::STREAM_CUT, "the connection broke mid-stream");
  if (reader.events() == 0)
    return fail(ErrorKind::MALFORMED, "the response had no SSE events (does the server stream?)");
  if (!reader.complete_on_clean_close())
    return fail(ErrorKind::STREAM_CUT, "the stream ended without [DONE] or a finish_reason");
  rec.success = true;
  return rec;
}

void BenchClient::interrupt() { http_->stop(); }

BenchClient& BenchClientPool::get(size_t worker) {
  std::lock_guard lock(mu_);
  SPARK_CHECK(worker < clients_.size(), "worker index out of range");
  if (!clients_[worker]) clients_[worker] = std::make_unique<BenchClient>(target_);
  return *clients_[worker];
}

void BenchClientPool::interrupt_all() {
  std::lock_guard lock(mu_);
  for (auto& c : clients_)
    if (c) c->interrupt();
}

}  // namespace spark
