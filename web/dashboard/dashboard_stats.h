// dashboard_stats.h — the dashboard's per-second series: one sampler thread computes each
// second's point once and hands the same serialized event to every stream subscriber.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/core/metrics.h"
#include "engine/util/mem_info.h"
#include "web/request_log.h"

namespace spark {

// Memory figures that do not change every second (they come from the memory plan).
struct MemoryFigures {
  uint64_t weights_bytes = 0;
  uint64_t kv_bytes = 0;
  uint64_t state_bytes = 0;  // a hybrid model's recurrent state slots
};

// Where the sampler reads from; every function is called on the sampler thread only.
struct StatsSources {
  std::function<std::optional<MetricsSnapshot>()> metrics;  // nullopt while no engine runs
  std::function<MemoryFigures()> memory;
  std::function<std::optional<HostMemory>()> host_memory;  // MemTotal and MemAvailable; nullopt: unknown
  std::function<nlohmann::json()> live;  // small fields sent every second (health, uptime, peer)
  std::function<bool()> closing;         // true once streams must end (drain, stop)
  const RequestLog* requests = nullptr;
};

// One second of the dashboard's charts. Rates are over the second before `t_unix_ms`;
// percentiles over the requests that finished in the last kLatencyWindow.
struct StatsPoint {
  int64_t t_unix_ms = 0;
  double prompt_tps = 0;
  double generation_tps = 0;
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_total = 0;
  std::optional<double> prefix_hit_rate;  // none when nothing was looked up that second
  std::optional<double> spec_acceptance_rate;  // accepted / drafted tokens; none when nothing was drafted
  std::optional<double> ttft_p50, ttft_p95, tpot_p50, tpot_p95;  // seconds
  uint64_t mem_weights = 0, mem_kv = 0, mem_state = 0;
  // With the box's figures: mem_weights + mem_kv + mem_state + mem_other + mem_free is its total
  // (split_host_memory).
  std::optional<uint64_t> mem_free, mem_other;
};

// The memory chart stacks to the box's total: sparkd's weights, KV and state as planned, then
// what the OS reports available, capped so that the stack never passes the total (KV pages
// reserved but not touched yet, and mapped weights in the page cache, count as available to
// the OS too), and the rest: the OS's and other processes'.
void split_host_memory(StatsPoint& p, const HostMemory& box);

class StatsSampler {
 public:
  static constexpr int kHistorySeconds = 300;
  static constexpr int kLatencyWindowSeconds = 30;

  explicit StatsSampler(StatsSources sources);
  ~StatsSampler();
  StatsSampler(const StatsSampler&) = delete;
  StatsSampler& operator=(const StatsSampler&) = delete;

  struct Tick {
    uint64_t seq = 0;
    std::shared_ptr<const std::string> event;  // a complete SSE event, "event: stats\n..."
  };
  // Waits up to `timeout` for a tick newer than `after`. nullopt on timeout, and at once
  // when closed (the caller then ends its stream).
  std::optional<Tick> wait_next(uint64_t after, std::chrono::milliseconds timeout);
  bool closed() const;
  uint64_t latest_seq() const;

  // The kept history as columns ({"t": [...], "prompt_tps": [...], ...}) for the snapshot.
  nlohmann::json history() const;
  nlohmann::json totals() const;  // lifetime counters as of the last tick

 private:
  void loop();
  void sample(Clock::time_point now);

  StatsSources sources_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StatsPoint> points_;
  nlohmann::json totals_ = nlohmann::json::object();
  std::optional<MetricsSnapshot> last_metrics_;
  Clock::time_point last_sample_;
  uint64_t requests_version_ = 0;  // sampler thread only
  Tick latest_;
  bool closed_ = false;
  bool stop_ = false;
  std::thread thread_;
};

nlohmann::json point_json(const StatsPoint& p);
nlohmann::json record_json(const RequestLogEntry& r);
// The structured-outputs panel's figures since start: constrained requests (in total and
// by kind), refusals, cache hits, and the mask and compile times from their histograms.
nlohmann::json structured_output_json(const MetricsSnapshot& m);

}  // namespace spark
