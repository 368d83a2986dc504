// dashboard.cpp — the dashboard's routes: the embedded page and files, GET /api/snapshot
// and the GET /api/stream SSE feed of the sampler's per-second events.
#include "web/dashboard/dashboard.h"

#include <httplib.h>

#include <atomic>

#include "engine/core/engine.h"
#include "engine/peer/head.h"
#include "engine/util/mem_info.h"
#include "engine/util/version.h"
#include "web/assets.h"
#include "web/dashboard/dashboard_config.h"
#include "web/dashboard/dashboard_stats.h"
#include "web/http_error.h"

namespace spark {
namespace {

// Each stream holds an HTTP worker; a few per box is plenty (one per open tab).
constexpr int kMaxStreams = 16;
constexpr auto kKeepAlive = std::chrono::milliseconds(2500);

struct Dashboard {
  App& app;
  std::vector<App*> models;  // every served model, app first
  std::unique_ptr<StatsSampler> sampler;
  std::atomic<int> streams{0};
  Dashboard(App& a, std::vector<App*> all) : app(a), models(all.empty() ? std::vector<App*>{&a} : std::move(all)) {}
};

int64_t unix_ms(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::string status_name(ServeStatus s) {
  switch (s) {
    case ServeStatus::LOADING: return "loading";
    case ServeStatus::READY: return "ready";
    case ServeStatus::DRAINING: return "draining";
    case ServeStatus::DEAD: return "dead";
  }
  return "unknown";
}

nlohmann::json health_json(const App& app) {
  const ServeStatus s = app.state.status();
  std::string problem = app.state.problem();
  return {{"status", problem.empty() || s != ServeStatus::READY ? status_name(s) : "unhealthy"},
          {"reason", s == ServeStatus::READY ? problem : app.state.reason()},
          {"in_flight", app.state.in_flight()}};
}

double uptime_s(const App& app) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - app.state.started()).count();
}

// What the peer panel shows: the configuration, and on a head the pair's live state
// (link_state "waiting", "up", "down" or "refused"; rtt and bandwidth measured at pairing).
nlohmann::json peer_json(const App& app) {
  const PeerConfig& p = app.config.peer;
  auto when = [&](auto v) { return p.enabled ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j = {{"enabled", p.enabled},
                      {"role", when(p.role)},
                      {"address", when(p.head_addr)},
                      {"transport", when(p.transport)},
                      {"link_state", p.enabled ? nlohmann::json(nullptr) : nlohmann::json("disabled")},
                      {"worker", nullptr},
                      {"link", nullptr},
                      {"rtt_ms", nullptr},
                      {"link_bytes_per_s", nullptr},
                      {"tx_bytes", nullptr},
                      {"rx_bytes", nullptr},
                      {"last_error", nullptr}};
  if (app.peer == nullptr) return j;
  PeerStatus st = app.peer->status();
  auto known = [](double v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  j["link_state"] = st.state;
  j["worker"] = st.worker.empty() ? nlohmann::json(nullptr) : nlohmann::json(st.worker);
  j["link"] = st.link.empty() ? nlohmann::json(nullptr) : nlohmann::json(st.link);
  j["rtt_ms"] = known(st.rtt_ms);
  j["link_bytes_per_s"] = known(st.link_bytes_per_s);
  j["tx_bytes"] = st.tx_bytes;
  j["rx_bytes"] = st.rx_bytes;
  j["hidden_bytes"] = st.hidden_bytes;
  j["hidden_tokens"] = st.hidden_tokens;
  j["pairings"] = st.pairings;
  j["last_error"] = st.reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(st.reason);
  return j;
}

// GET /api/peer: the pair's state and the last micro-batches' trips through both boxes
// (wall-clock microseconds), which show whether both compute at the same time.
void peer_route(const App& app, httplib::Response& res) {
  nlohmann::json j = peer_json(app);
  nlohmann::json timeline = nlohmann::json::array();
  if (app.peer)
    for (const PipelineTiming& t : app.peer->timeline())
      timeline.push_back({{"id", t.id},
                          {"tokens", t.tokens},
                          {"head_start_us", t.head_start_us},
                          {"head_end_us", t.head_end_us},
                          {"worker_start_us", t.worker_start_us},
                          {"worker_end_us", t.worker_end_us}});
  j["timeline"] = std::move(timeline);
  res.set_content(j.dump(), "application/json");
}

// Engine-dependent figures. serve fills the engine and model fields before the status
// turns READY (an atomic store), so reading them after seeing READY is safe; after
// DRAINING the engine may be going away and is not touched again.
bool model_ready(const App& app) { return app.state.status() == ServeStatus::READY; }

std::optional<MetricsSnapshot> engine_metrics(const App& app) {
  if (!model_ready(app) || !app.engine) return std::nullopt;
  return app.engine->metrics();
}

// Every model's, summed: the chart stacks them against the box's total.
MemoryFigures memory_figures(const std::vector<App*>& models) {
  MemoryFigures sum;
  for (const App* m : models) {
    if (!model_ready(*m)) continue;
    sum.weights_bytes += m->weight_bytes;
    sum.kv_bytes += m->kv_cache_bytes;
    sum.state_bytes += m->state_bytes;
  }
  return sum;
}

// Each model's name, role and memory, for the list under the memory chart.
nlohmann::json models_json(const std::vector<App*>& models) {
  nlohmann::json out = nlohmann::json::array();
  for (const App* m : models)
    out.push_back({{"name", m->model_id},
                   {"role", m->config.model.role},
                   {"weights_bytes", m->weight_bytes},
                   {"kv_bytes", m->kv_cache_bytes},
                   {"state_bytes", m->state_bytes}});
  return out;
}

nlohmann::json server_json(const App& app) {
  const auto started = std::chrono::system_clock::now() -
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           std::chrono::steady_clock::now() - app.state.started());
  return {{"model", app.model_id},
          {"version", version_number()},
          {"build", version_string()},
          {"cuda_build", bool(SPARKD_CUDA)},
          {"backend", app.backend_description.empty() ? app.config.engine.backend : app.backend_description},
          {"max_model_len", model_ready(app) && app.engine ? nlohmann::json(app.engine->max_model_len()) : nullptr},
          {"kv_blocks", model_ready(app) && app.engine ? nlohmann::json(app.engine->num_kv_blocks()) : nullptr},
          {"started", unix_ms(started)},
          {"uptime_s", uptime_s(app)},
          {"max_num_seqs", app.config.engine.max_num_seqs},
          {"block_size", app.config.engine.block_size},
          {"prefix_caching", app.config.engine.enable_prefix_caching},
          {"api_keys", !app.config.server.api_keys.empty() || !app.config.server.api_key_file.empty()}};
}

// Each model's engine, when several are served: the charts follow the first, and this is
// where the others' work shows.
nlohmann::json models_activity_json(const std::vector<App*>& models) {
  nlohmann::json out = nlohmann::json::array();
  if (models.size() < 2) return out;
  for (const App* m : models) {
    nlohmann::json row = {{"name", m->model_id}, {"role", m->config.model.role}};
    if (std::optional<MetricsSnapshot> s = engine_metrics(*m)) {
      uint64_t finished = 0;
      for (uint64_t n : s->requests_finished) finished += n;
      row.update({{"running", s->num_running},
                  {"waiting", s->num_waiting},
                  {"finished", finished},
                  {"prompt_tokens", s->prompt_tokens},
                  {"generation_tokens", s->generation_tokens}});
    }
    out.push_back(std::move(row));
  }
  return out;
}

// Small fields sent with every tick.
nlohmann::json live_json(const App& app, const std::vector<App*>& models) {
  return {{"health", health_json(app)},
          {"uptime_s", uptime_s(app)},
          {"peer", peer_json(app)},
          {"models", models_activity_json(models)}};
}

StatsSources sources_for(Dashboard& d) {
  App& app = d.app;
  StatsSources s;
  s.metrics = [&app] { return engine_metrics(app); };
  s.memory = [&d] { return memory_figures(d.models); };
  s.host_memory = []() -> std::optional<HostMemory> {
    try {
      return read_host_memory();
    } catch (const std::exception&) {
      return std::nullopt;
    }
  };
  s.live = [&d] { return live_json(d.app, d.models); };
  s.closing = [&app] {
    ServeStatus st = app.state.status();
    return st == ServeStatus::DRAINING || st == ServeStatus::DEAD;
  };
  s.requests = &app.requests;
  return s;
}

void snapshot(Dashboard& d, httplib::Response& res) {
  nlohmann::json server = server_json(d.app);
  server["models"] = models_json(d.models);
  nlohmann::json out = {{"server", std::move(server)},
                        {"live", live_json(d.app, d.models)},
                        {"peer", peer_json(d.app)},
                        {"series", d.sampler->history()},
                        {"totals", d.sampler->totals()},
                        {"config", redacted_config(d.app.config)},
                        {"history_seconds", StatsSampler::kHistorySeconds},
                        {"latency_window_seconds", StatsSampler::kLatencyWindowSeconds}};
  nlohmann::json requests = nlohmann::json::array();
  for (const auto& r : d.app.requests.recent()) requests.push_back(record_json(r));
  out["requests"] = std::move(requests);
  res.set_header("Cache-Control", "no-store");
  send_json(res, 200, out.dump());
}

void stream(Dashboard& d, httplib::Response& res) {
  const ServeStatus st = d.app.state.status();
  if (st == ServeStatus::DRAINING || st == ServeStatus::DEAD)
    throw HttpError(503, "server is not serving: " + d.app.state.reason(), "service_unavailable_error");
  if (d.streams.fetch_add(1) >= kMaxStreams) {
    d.streams.fetch_sub(1);
    throw HttpError(429, "too many dashboard streams are open (" + std::to_string(kMaxStreams) + ")",
                    "rate_limit_error");
  }
  res.set_header("Cache-Control", "no-store");
  res.set_header("X-Accel-Buffering", "no");  // a reverse proxy must not hold events back
  Dashboard* dp = &d;
  uint64_t last = d.sampler->latest_seq();
  bool opened = false;
  res.set_chunked_content_provider(
      "text/event-stream",
      [dp, last, opened](size_t, httplib::DataSink& sink) mutable {
        if (!opened) {  // tells the browser right away that the stream is up
          opened = true;
          static const std::string hello = "retry: 2000\n: sparkd stats\n\n";
          return sink.write(hello.data(), hello.size());
        }
        auto tick = dp->sampler->wait_next(last, kKeepAlive);
        if (!tick) {
          if (dp->sampler->closed()) {  // draining or stopping: end the stream
            sink.done();
            return true;
          }
          static const std::string ping = ": ping\n\n";
          return sink.write(ping.data(), ping.size());
        }
        last = tick->seq;
        return sink.write(tick->event->data(), tick->event->size());
      },
      [dp](bool) { dp->streams.fetch_sub(1); });
}

// The dashboard page itself; with server.dashboard_auth = "api_key" it needs a key, sent
// as a Bearer header or as the session cookie the login page sets.
bool page_allowed(const App& app, const httplib::Request& req) {
  if (app.config.server.dashboard_auth != "api_key" || app.http.key_ok(req)) return true;
  const std::string cookies = req.get_header_value("Cookie");
  const std::string name = "sparkd_key=";
  for (size_t pos = 0; pos < cookies.size();) {
    size_t end = cookies.find(';', pos);
    if (end == std::string::npos) end = cookies.size();
    size_t start = cookies.find_first_not_of(' ', pos);
    if (start < end && cookies.compare(start, name.size(), name) == 0) {
      httplib::Request with_key;
      with_key.headers.emplace("Authorization", "Bearer " + httplib::detail::decode_url(
                                                    cookies.substr(start + name.size(), end - start - name.size()), false));
      return app.http.key_ok(with_key);
    }
    pos = end + 1;
  }
  return false;
}

void send_asset(httplib::Response& res, const std::string& path, int status = 200) {
  const Asset* a = find_asset(path);
  if (!a) throw HttpError(404, "no dashboard file " + path, "not_found_error");
  res.status = status;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                 "connect-src 'self'; frame-ancestors 'none'");
  res.set_content(std::string(a->data), std::string(a->mime));
}

}  // namespace

std::vector<Route> dashboard_routes(App& app, std::vector<App*> models) {
  if (!app.config.server.dashboard) return {};
  auto owned = std::make_shared<Dashboard>(app, std::move(models));
  owned->sampler = std::make_unique<StatsSampler>(sources_for(*owned));
  Dashboard* d = owned.get();
  app.dashboard = owned;  // the app owns it: the sampler stops before what it reads goes away

  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  return {
      {"GET", "/", Access::PUBLIC, false,
       [d](Req q, Res r) {
         if (page_allowed(d->app, q)) send_asset(r, "index.html");
         else send_asset(r, "login.html", 401);
       }},
      // Files only: no data is in them. The login page needs them before it has a key.
      {"GET", R"(/static/([A-Za-z0-9_\-]+\.(?:css|js|svg|png)))", Access::PUBLIC, false,
       [](Req q, Res r) { send_asset(r, q.matches[1].str()); }},
      {"GET", "/api/snapshot", Access::API_KEY, false, [d](Req, Res r) { snapshot(*d, r); }},
      {"GET", "/api/stream", Access::API_KEY, false, [d](Req, Res r) { stream(*d, r); }},
      {"GET", "/api/peer", Access::API_KEY, false, [d](Req, Res r) { peer_route(d->app, r); }},
  };
}

}  // namespace spark
