// dashboard_stats.cpp — the sampler thread: once a second it turns engine counters into
// rates, gauges and latency percentiles, keeps the history, and publishes one SSE event.
#include "web/dashboard/dashboard_stats.h"

#include <algorithm>
#include <cmath>

#include "engine/util/log.h"

namespace spark {
namespace {

constexpr auto kPeriod = std::chrono::seconds(1);
// How often the sampler looks at `closing`: a drain ends the streams within this delay.
constexpr auto kPoll = std::chrono::milliseconds(200);

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Linear interpolation between closest ranks, as numpy's default percentile does.
double percentile(std::vector<double>& values, double q) {
  std::sort(values.begin(), values.end());
  const double pos = q * double(values.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - double(lo));
}

nlohmann::json opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }
nlohmann::json opt(const std::optional<uint64_t>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

nlohmann::json totals_json(const MetricsSnapshot& m) {
  return {{"prompt_tokens", m.prompt_tokens},
          {"generation_tokens", m.generation_tokens},
          {"prefix_cache_queries", m.prefix_cache_queries},
          {"prefix_cache_hits", m.prefix_cache_hits},
          {"preemptions", m.preemptions},
          {"spec_decode_num_draft_tokens", m.spec_num_draft_tokens},
          {"spec_decode_num_accepted_tokens", m.spec_num_accepted_tokens},
          {"engine_steps", m.engine_steps},
          {"requests_finished",
           {{"stop", m.finished(FinishReason::STOP)},
            {"length", m.finished(FinishReason::LENGTH)},
            {"abort", m.finished(FinishReason::ABORT)},
            {"error", m.finished(FinishReason::ERROR)}}},
          {"structured_output", structured_output_json(m)}};
}

}  // namespace

nlohmann::json point_json(const StatsPoint& p) {
  return {{"t", p.t_unix_ms},
          {"prompt_tps", p.prompt_tps},
          {"generation_tps", p.generation_tps},
          {"running", p.running},
          {"waiting", p.waiting},
          {"kv_blocks_used", p.kv_blocks_used},
          {"kv_blocks_total", p.kv_blocks_total},
          {"prefix_hit_rate", opt(p.prefix_hit_rate)},
          {"spec_acceptance_rate", opt(p.spec_acceptance_rate)},
          {"ttft_p50", opt(p.ttft_p50)},
          {"ttft_p95", opt(p.ttft_p95)},
          {"tpot_p50", opt(p.tpot_p50)},
          {"tpot_p95", opt(p.tpot_p95)},
          {"mem_weights", p.mem_weights},
          {"mem_kv", p.mem_kv},
          {"mem_state", p.mem_state},
          {"mem_free", opt(p.mem_free)},
          {"mem_other", opt(p.mem_other)}};
}

nlohmann::json structured_output_json(const MetricsSnapshot& m) {
  nlohmann::json by_kind = nlohmann::json::object();
  uint64_t requests = 0, refused = 0;
  for (size_t k = 0; k < kNumConstraintKinds; ++k) {
    const auto kind = ConstraintKind(k);
    if (m.constrained(kind) > 0) by_kind[constraint_kind_name(kind)] = m.constrained(kind);
    requests += m.constrained(kind);
    refused += m.refused(kind);
  }
  // Quantiles interpolate inside the histogram's buckets: good to a bucket's width.
  auto quantile = [](const Histogram& h, double q) {
    return h.count ? nlohmann::json(h.quantile(q)) : nlohmann::json(nullptr);
  };
  const Histogram& mask = m.constraint_mask_time;
  const Histogram& compile = m.constraint_compile_time;
  return {{"requests", requests},
          {"by_kind", std::move(by_kind)},
          {"refused", refused},
          {"cache_hits", m.constraint_cache_hits},
          {"masks", mask.count},
          {"mask_mean_s", mask.count ? nlohmann::json(mask.sum / double(mask.count)) : nlohmann::json(nullptr)},
          {"mask_p99_s", quantile(mask, 0.99)},
          {"compiles", compile.count},
          {"compile_p50_s", quantile(compile, 0.5)},
          {"compile_p99_s", quantile(compile, 0.99)}};
}

nlohmann::json record_json(const RequestLogEntry& r) {
  auto num = [](double v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  return {{"id", r.id},
          {"status", r.status},
          {"started", r.started_unix_ms},
          {"prompt_tokens", r.prompt_tokens},
          {"cached_tokens", r.cached_tokens},
          {"generated_tokens", r.generated_tokens},
          {"ttft_s", num(r.ttft_s)},
          {"tpot_s", num(r.tpot_s)},
          {"e2e_s", num(r.e2e_s)},
          {"finish_reason", r.finish_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.finish_reason)},
          {"error", r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
          {"version", r.version}};
}

void split_host_memory(StatsPoint& p, const HostMemory& box) {
  const uint64_t ours = p.mem_weights + p.mem_kv + p.mem_state;
  const uint64_t room = box.total_bytes > ours ? box.total_bytes - ours : 0;
  p.mem_free = std::min(box.available_bytes, room);
  p.mem_other = room - *p.mem_free;
}

StatsSampler::StatsSampler(StatsSources sources) : sources_(std::move(sources)) {
  last_sample_ = Clock::now();
  thread_ = std::thread([this] { loop(); });
}

StatsSampler::~StatsSampler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    closed_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StatsSampler::loop() {
  auto next = Clock::now() + kPeriod;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, std::min(next, Clock::now() + kPoll), [this] { return stop_; });
      if (stop_) return;
    }
    if (sources_.closing && sources_.closing()) {
      std::lock_guard lock(mu_);
      if (!closed_) {
        closed_ = true;
        cv_.notify_all();  // every stream ends now instead of at its next tick
      }
    }
    // Once closed, nothing is read any more: what the sources point at may be going away.
    if (closed()) continue;
    const auto now = Clock::now();
    if (now < next) continue;
    next += kPeriod;
    if (next < now) next = now + kPeriod;  // the machine stalled: skip, do not burst
    try {
      sample(now);
    } catch (const std::exception& e) {
      log_warn("dashboard stats sample failed: ", e.what());
    }
  }
}

void StatsSampler::sample(Clock::time_point now) {
  StatsPoint p;
  p.t_unix_ms = unix_ms_now();
  std::optional<MetricsSnapshot> m = sources_.metrics ? sources_.metrics() : std::nullopt;
  const double dt = std::max(1e-3, std::chrono::duration<double>(now - last_sample_).count());
  if (m) {
    p.running = m->num_running;
    p.waiting = m->num_waiting;
    p.kv_blocks_used = m->kv_blocks_used;
    p.kv_blocks_total = m->kv_blocks_total;
    if (last_metrics_) {
      p.prompt_tps = double(m->prompt_tokens - last_metrics_->prompt_tokens) / dt;
      p.generation_tps = double(m->generation_tokens - last_metrics_->generation_tokens) / dt;
      const uint64_t queries = m->prefix_cache_queries - last_metrics_->prefix_cache_queries;
      if (queries > 0) p.prefix_hit_rate = double(m->prefix_cache_hits - last_metrics_->prefix_cache_hits) / double(queries);
      const uint64_t drafted = m->spec_num_draft_tokens - last_metrics_->spec_num_draft_tokens;
      if (drafted > 0)
        p.spec_acceptance_rate =
            double(m->spec_num_accepted_tokens - last_metrics_->spec_num_accepted_tokens) / double(drafted);
    }
  }
  if (sources_.requests) {
    std::vector<double> ttft, tpot;
    for (const auto& s : sources_.requests->latencies_since(now - std::chrono::seconds(kLatencyWindowSeconds))) {
      ttft.push_back(s.ttft_s);
      if (s.tpot_s >= 0) tpot.push_back(s.tpot_s);
    }
    if (!ttft.empty()) p.ttft_p50 = percentile(ttft, 0.5), p.ttft_p95 = percentile(ttft, 0.95);
    if (!tpot.empty()) p.tpot_p50 = percentile(tpot, 0.5), p.tpot_p95 = percentile(tpot, 0.95);
  }
  if (sources_.memory) {
    MemoryFigures mem = sources_.memory();
    p.mem_weights = mem.weights_bytes;
    p.mem_kv = mem.kv_bytes;
    p.mem_state = mem.state_bytes;
  }
  if (sources_.host_memory)
    if (const std::optional<HostMemory> box = sources_.host_memory()) split_host_memory(p, *box);

  // Built once here, written as-is by every subscriber.
  nlohmann::json event = {{"point", point_json(p)}};
  event["totals"] = m ? totals_json(*m) : nlohmann::json::object();
  if (sources_.live) event["live"] = sources_.live();
  nlohmann::json changed = nlohmann::json::array();
  if (sources_.requests) {
    uint64_t latest = requests_version_;
    for (const auto& r : sources_.requests->changed_since(requests_version_, &latest)) changed.push_back(record_json(r));
    requests_version_ = latest;
  }
  event["requests"] = std::move(changed);

  std::lock_guard lock(mu_);
  const uint64_t seq = latest_.seq + 1;
  event["seq"] = seq;
  latest_ = {seq, std::make_shared<const std::string>("event: stats\ndata: " + event.dump() + "\n\n")};
  points_.push_back(p);
  while (points_.size() > size_t(kHistorySeconds)) points_.pop_front();
  if (m) totals_ = event["totals"];
  last_metrics_ = std::move(m);
  last_sample_ = now;
  cv_.notify_all();
}

std::optional<StatsSampler::Tick> StatsSampler::wait_next(uint64_t after, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return closed_ || latest_.seq > after; });
  if (closed_ || latest_.seq <= after) return std::nullopt;
  return latest_;
}

bool StatsSampler::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

uint64_t StatsSampler::latest_seq() const {
  std::lock_guard lock(mu_);
  return latest_.seq;
}

nlohmann::json StatsSampler::history() const {
  std::lock_guard lock(mu_);
  nlohmann::json cols = nlohmann::json::object();
  for (const auto& p : points_) {
    const nlohmann::json point = point_json(p);  // items() must not outlive its object
    for (const auto& [key, value] : point.items()) cols[key].push_back(value);
  }
  cols["seq"] = latest_.seq;  // the stream's next event follows this one
  return cols;
}

nlohmann::json StatsSampler::totals() const {
  std::lock_guard lock(mu_);
  return totals_;
}

}  // namespace spark
