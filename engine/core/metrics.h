// metrics.h — the engine's counters, gauges and latency histograms, updated by the
// engine thread and read as consistent snapshots by the HTTP and dashboard threads.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <span>
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

// What a structured-output request constrained: the `kind` label of its counters.
// TOOL_CALL: tool_choice "required" or a named function; TOOL_AUTO: tool_choice "auto",
// whose calls are constrained from the moment the model opens one.
enum class ConstraintKind { JSON_SCHEMA, JSON_OBJECT, REGEX, CHOICE, TOOL_CALL, TOOL_AUTO };
inline constexpr size_t kNumConstraintKinds = 6;
const char* constraint_kind_name(ConstraintKind kind);  // "json_schema", ..., "tool_auto"

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
  // Structured outputs, by ConstraintKind: requests whose constraint compiled, and those
  // refused with a 400 (an unsupported keyword, a limit hit); compiles answered from the
  // compiled-grammar cache.
  std::array<uint64_t, kNumConstraintKinds> constrained_requests{};
  std::array<uint64_t, kNumConstraintKinds> constraints_refused{};
  uint64_t constraint_cache_hits = 0;
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
  Histogram constraint_mask_time;     // one observation per token mask computed
  Histogram constraint_compile_time;  // per compile that missed the cache, refused ones too

  uint64_t finished(FinishReason r) const { return requests_finished[static_cast<size_t>(r)]; }
  uint64_t constrained(ConstraintKind k) const { return constrained_requests[static_cast<size_t>(k)]; }
  uint64_t refused(ConstraintKind k) const { return constraints_refused[static_cast<size_t>(k)]; }
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
  // A request's constraint compiled in `seconds` (its grammar from the cache or not), or
  // was refused after `seconds`.
  void constraint_compiled(ConstraintKind kind, double seconds, bool cache_hit);
  void constraint_refused(ConstraintKind kind, double seconds);
  // The token masks of one step, in seconds each: one lock for all of them.
  void observe_mask_times(std::span<const double> seconds);

  MetricsSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  MetricsSnapshot m_;
};

}  // namespace spark
