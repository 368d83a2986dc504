// metrics.cpp — the thread-safe metrics registry and its fixed-bucket histograms.
#include "engine/core/metrics.h"

#include <algorithm>

#include "engine/util/check.h"

namespace spark {

namespace {

// Bucket bounds in seconds, close to vLLM's so dashboards built for it read the same.
const std::vector<double> kTtftBounds = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                         0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
const std::vector<double> kTpotBounds = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
                                         0.5,  0.75,  1.0,  2.5,   5.0, 7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kRequestBounds = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
                                            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0};

// A token mask costs from about a microsecond (a literal) to tens of milliseconds (a wide
// alternation over a 150k vocabulary); compiles from a fraction of a millisecond to seconds.
const std::vector<double> kMaskBounds = {1e-6, 2.5e-6, 5e-6,  1e-5,   2.5e-5, 5e-5,  1e-4,  2.5e-4,
                                         5e-4, 0.001,  0.0025, 0.005, 0.01,   0.025, 0.05,  0.1};
const std::vector<double> kCompileBounds = {1e-4, 2.5e-4, 5e-4, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                            0.05, 0.1,    0.25, 0.5,   1.0,    2.5,   5.0,  10.0};

}  // namespace

const char* constraint_kind_name(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::JSON_SCHEMA: return "json_schema";
    case ConstraintKind::JSON_OBJECT: return "json_object";
    case ConstraintKind::REGEX: return "regex";
    case ConstraintKind::CHOICE: return "choice";
    case ConstraintKind::TOOL_CALL: return "tool_call";
    case ConstraintKind::TOOL_AUTO: return "tool_auto";
  }
  return "unknown";
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds(std::move(upper_bounds)) {
  SPARK_CHECK(std::is_sorted(bounds.begin(), bounds.end()), "histogram bounds must ascend");
  counts.assign(bounds.size() + 1, 0);
}

void Histogram::observe(double value) {
  size_t i = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
  ++counts[i];
  sum += value;
  ++count;
}

double Histogram::quantile(double q) const {
  if (count == 0) return 0;
  const double rank = q * static_cast<double>(count);
  uint64_t below = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (static_cast<double>(below + counts[i]) >= rank && counts[i] > 0) {
      const double lo = i == 0 ? 0.0 : bounds[i - 1];
      if (i == bounds.size()) return lo;  // the open bucket: its lower edge is all we know
      const double frac = (rank - static_cast<double>(below)) / static_cast<double>(counts[i]);
      return lo + (bounds[i] - lo) * std::clamp(frac, 0.0, 1.0);
    }
    below += counts[i];
  }
  return bounds.empty() ? 0 : bounds.back();
}

Metrics::Metrics() {
  m_.time_to_first_token = Histogram(kTtftBounds);
  m_.time_per_output_token = Histogram(kTpotBounds);
  m_.e2e_latency = Histogram(kRequestBounds);
  m_.queue_time = Histogram(kRequestBounds);
  m_.constraint_mask_time = Histogram(kMaskBounds);
  m_.constraint_compile_time = Histogram(kCompileBounds);
}

void Metrics::add_prompt_tokens(uint64_t n) { std::lock_guard lock(mu_); m_.prompt_tokens += n; }
void Metrics::add_generation_tokens(uint64_t n) { std::lock_guard lock(mu_); m_.generation_tokens += n; }
void Metrics::add_preemptions(uint64_t n) { std::lock_guard lock(mu_); m_.preemptions += n; }
void Metrics::add_step() { std::lock_guard lock(mu_); ++m_.engine_steps; }

void Metrics::add_spec_decode(size_t drafted, size_t accepted) {
  std::lock_guard lock(mu_);
  ++m_.spec_num_drafts;
  m_.spec_num_draft_tokens += drafted;
  m_.spec_num_accepted_tokens += accepted;
  if (m_.spec_accepted_per_pos.size() < drafted) m_.spec_accepted_per_pos.resize(drafted, 0);
  for (size_t i = 0; i < accepted; ++i) ++m_.spec_accepted_per_pos[i];
}

void Metrics::add_prefix_cache(uint64_t queries, uint64_t hits) {
  std::lock_guard lock(mu_);
  m_.prefix_cache_queries += queries;
  m_.prefix_cache_hits += hits;
}

void Metrics::request_finished(FinishReason reason) {
  std::lock_guard lock(mu_);
  ++m_.requests_finished[static_cast<size_t>(reason)];
}

void Metrics::set_gauges(int64_t running, int64_t waiting, int64_t kv_used, int64_t kv_total) {
  std::lock_guard lock(mu_);
  m_.num_running = running;
  m_.num_waiting = waiting;
  m_.kv_blocks_used = kv_used;
  m_.kv_blocks_total = kv_total;
}

void Metrics::observe_ttft(double s) { std::lock_guard lock(mu_); m_.time_to_first_token.observe(s); }
void Metrics::observe_tpot(double s) { std::lock_guard lock(mu_); m_.time_per_output_token.observe(s); }
void Metrics::observe_e2e(double s) { std::lock_guard lock(mu_); m_.e2e_latency.observe(s); }
void Metrics::observe_queue_time(double s) { std::lock_guard lock(mu_); m_.queue_time.observe(s); }

void Metrics::constraint_compiled(ConstraintKind kind, double seconds, bool cache_hit) {
  std::lock_guard lock(mu_);
  ++m_.constrained_requests[static_cast<size_t>(kind)];
  if (cache_hit) ++m_.constraint_cache_hits;
  else m_.constraint_compile_time.observe(seconds);
}

void Metrics::constraint_refused(ConstraintKind kind, double seconds) {
  std::lock_guard lock(mu_);
  ++m_.constraints_refused[static_cast<size_t>(kind)];
  m_.constraint_compile_time.observe(seconds);
}

void Metrics::observe_mask_times(std::span<const double> seconds) {
  if (seconds.empty()) return;
  std::lock_guard lock(mu_);
  for (double s : seconds) m_.constraint_mask_time.observe(s);
}

MetricsSnapshot Metrics::snapshot() const {
  std::lock_guard lock(mu_);
  return m_;
}

}  // namespace spark
