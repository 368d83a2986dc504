// request_log.cpp — the recent-requests ring and the latency samples behind the dashboard's
// percentile charts.
#include "web/request_log.h"

#include <algorithm>

namespace spark {
namespace {

// Enough samples for percentiles over the dashboard's window at high request rates,
// bounded so a flood of tiny requests cannot grow memory.
constexpr size_t kMaxLatencySamples = 20000;
constexpr auto kLatencyKeep = std::chrono::seconds(120);

bool is_set(Clock::time_point t) { return t != Clock::time_point{}; }

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Fills the counts and the timings the engine reported so far.
void apply_output(RequestLogEntry& r, const RequestOutput& out) {
  r.prompt_tokens = std::max(r.prompt_tokens, out.num_prompt_tokens);
  r.cached_tokens = out.num_cached_tokens;
  r.generated_tokens = out.num_output_tokens;
  const RequestTimings& t = out.timings;
  if (is_set(t.queued) && is_set(t.first_token)) r.ttft_s = seconds(t.queued, t.first_token);
  if (is_set(t.first_token) && is_set(t.last_token) && out.num_output_tokens >= 2)
    r.tpot_s = seconds(t.first_token, t.last_token) / double(out.num_output_tokens - 1);
  if (r.status == "queued" && (is_set(t.scheduled) || out.num_output_tokens > 0)) r.status = "running";
}

}  // namespace

RequestLog::RequestLog(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

RequestLogEntry* RequestLog::find(const std::string& id) {
  // Live requests sit near the back; the ring is small, so a backward scan is cheap.
  for (auto it = records_.rbegin(); it != records_.rend(); ++it)
    if (it->id == id) return &*it;
  return nullptr;
}

void RequestLog::touch(RequestLogEntry& r) { r.version = ++version_; }

void RequestLog::start(const std::string& id, int64_t prompt_tokens) {
  std::lock_guard lock(mu_);
  RequestLogEntry r;
  r.id = id;
  r.status = "queued";
  r.started_unix_ms = unix_ms_now();
  r.started = Clock::now();
  r.prompt_tokens = prompt_tokens;
  touch(r);
  records_.push_back(std::move(r));
  while (records_.size() > capacity_) records_.pop_front();
}

void RequestLog::progress(const std::string& id, const RequestOutput& out) {
  std::lock_guard lock(mu_);
  RequestLogEntry* r = find(id);
  if (!r || r->status == "finished" || r->status == "failed") return;
  apply_output(*r, out);
  touch(*r);
}

void RequestLog::finish(const std::string& id, const RequestOutput& out) {
  std::lock_guard lock(mu_);
  RequestLogEntry* r = find(id);
  if (!r) return;
  apply_output(*r, out);
  const RequestTimings& t = out.timings;
  r->e2e_s = is_set(t.queued) && is_set(t.finished) ? seconds(t.queued, t.finished) : seconds(r->started, Clock::now());
  r->finish_reason = out.finish_reason ? std::string(finish_reason_name(*out.finish_reason)) : "error";
  r->error = out.error;
  r->status = r->finish_reason == "error" ? "failed" : "finished";
  touch(*r);
  if (r->ttft_s >= 0) {
    latencies_.push_back({Clock::now(), r->ttft_s, r->tpot_s});
    const auto cutoff = Clock::now() - kLatencyKeep;
    while (!latencies_.empty() && (latencies_.size() > kMaxLatencySamples || latencies_.front().finished < cutoff))
      latencies_.pop_front();
  }
}

void RequestLog::fail(const std::string& id, const std::string& finish_reason, const std::string& error) {
  std::lock_guard lock(mu_);
  RequestLogEntry* r = find(id);
  if (!r || r->status == "finished" || r->status == "failed") return;
  r->e2e_s = seconds(r->started, Clock::now());
  r->finish_reason = finish_reason;
  r->error = error;
  r->status = finish_reason == "error" ? "failed" : "finished";
  touch(*r);
}

std::vector<RequestLogEntry> RequestLog::changed_since(uint64_t version, uint64_t* latest) const {
  std::lock_guard lock(mu_);
  std::vector<RequestLogEntry> out;
  for (const auto& r : records_)
    if (r.version > version) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.version < b.version; });
  if (latest) *latest = version_;
  return out;
}

std::vector<RequestLogEntry> RequestLog::recent() const {
  std::lock_guard lock(mu_);
  return {records_.rbegin(), records_.rend()};
}

uint64_t RequestLog::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

std::vector<LatencySample> RequestLog::latencies_since(Clock::time_point since) const {
  std::lock_guard lock(mu_);
  std::vector<LatencySample> out;
  for (auto it = latencies_.rbegin(); it != latencies_.rend() && it->finished >= since; ++it) out.push_back(*it);
  return out;
}

}  // namespace spark
