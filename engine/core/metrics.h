// metrics.h — the engine's counters, gauges and latency histograms, updated by the
// engine thread and read as consistent snapshots by the HTTP and dashboard threads.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

#include "engine/core/sequence.h"

namespace spark {

// Cumulative-free histogram: counts[i] holds observations <= bounds[i] and > bounds[i-1];
// counts.back() holds those above every bound (Prometheus' +Inf bucket after summing).
struct Histogram {
  std::vector<double> bounds;  // seconds, ascending
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> upper_bounds = {});
  void observe(double value);
  // The value below which a fraction q of observations fall, interpolated inside the
  // bucket (0 when empty); for dashboards, not for billing.
  double quantile(double q) const;
};

struct MetricsSnapshot {
  // Counters (since start).
  uint64_t prompt_tokens = 0;      // prompt tokens of admitted requests
  uint64_t generation_tokens = 0;  // sampled tokens
  uint64_t prefix_cache_queries = 0;  // tokens looked up in the prefix cache
  uint64_t prefix_cache_hits = 0;     // tokens found there
  uint64_t preemptions = 0;
  uint64_t engine_steps = 0;
  std::array<uint64_t, 4> requests_finished{};  // indexed by FinishReason
  // Speculative decoding: verified draft runs, their draft tokens, the accepted ones, and
  // per draft position how often it was accepted.
  uint64_t spec_num_drafts = 0;
  uint64_t spec_num_draft_tokens = 0;
  uint64_t spec_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
  // Gauges (as of the last step).
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  // Latencies in seconds.
  Histogram time_to_first_token;
  Histogram time_per_output_token;
  Histogram e2e_latency;
  Histogram queue_time;

  uint64_t finished(FinishReason r) const { return requests_finished[static_cast<size_t>(r)]; }
};

class Metrics {
 public:
  Metrics();

  void add_prompt_tokens(uint64_t n);
  void add_generation_tokens(uint64_t n);
  void add_prefix_cache(uint64_t queries, uint64_t hits);
  void add_preemptions(uint64_t n);
  void add_step();
  void add_spec_decode(size_t drafted, size_t accepted);
  void request_finished(FinishReason reason);
  void set_gauges(int64_t running, int64_t waiting, int64_t kv_used, int64_t kv_total);
  void observe_ttft(double seconds);
  void observe_tpot(double seconds);
  void observe_e2e(double seconds);
  void observe_queue_time(double seconds);

  MetricsSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  MetricsSnapshot m_;
};

}  // namespace spark
