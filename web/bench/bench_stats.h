// bench_stats.h — per-request records of a benchmark run, percentiles, and the summary
// (latency distributions, throughput, error counts) computed from them.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "web/bench/bench_sse.h"

namespace spark {

// What one request measured. Times are in seconds; `start_s` counts from the start of
// the timed run, the others from the moment the request was sent.
struct RequestRecord {
  size_t prompt_index = 0;
  double start_s = 0;
  bool success = false;
  ErrorKind error_kind = ErrorKind::NONE;
  std::string error;             // the server's or the transport's message
  int http_status = 0;           // 0 when no response arrived
  std::optional<double> ttft_s;  // first content chunk; absent when none arrived
  double e2e_s = 0;              // until the stream ended (or failed)
  std::vector<double> itl_s;     // gaps between consecutive content chunks
  long long output_tokens = 0;
  bool output_tokens_from_usage = false;  // else: counted content chunks
  long long prompt_tokens = 0;
  bool prompt_tokens_from_usage = false;   // else: the prompt generator's count
  std::optional<long long> cached_tokens;  // usage.prompt_tokens_details.cached_tokens
  size_t content_chunks = 0;

  // Time per output token as vLLM defines it: (e2e - ttft) / (output tokens - 1);
  // absent for requests with fewer than two output tokens.
  std::optional<double> tpot_s() const;
};

// The p-th percentile (0..100) with linear interpolation between the closest ranks, the
// definition numpy.percentile uses by default (so numbers compare with vLLM's tool).
// `sorted` must be sorted ascending and non-empty.
double percentile_sorted(const std::vector<double>& sorted, double p);

struct Distribution {
  size_t count = 0;  // values the statistics are over; all zero when count == 0
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
Distribution distribution_of(std::vector<double> values);

struct Summary {
  size_t planned = 0;  // prompts the run was asked to send
  size_t succeeded = 0;
  size_t failed = 0;                             // finished with an error
  size_t cancelled = 0;                          // in flight when the run was interrupted
  size_t not_sent = 0;                           // never started (the run was interrupted)
  std::array<size_t, kErrorKindCount> errors{};  // indexed by ErrorKind
  double duration_s = 0;                         // wall time of the timed run, warm-up excluded
  long long input_tokens = 0;                    // of succeeded requests
  long long output_tokens = 0;                   // of succeeded requests
  long long cached_tokens = 0;                   // of succeeded requests that reported it
  size_t cached_reported = 0;                    // succeeded requests that reported cached tokens
  size_t output_from_usage = 0;                  // succeeded requests whose output count came from usage
  double request_throughput = 0;                 // succeeded requests / duration
  double output_throughput = 0;                  // output tokens / duration
  double total_token_throughput = 0;             // (input + output tokens) / duration
  size_t max_concurrency_seen = 0;
  Distribution ttft, tpot, itl, e2e;  // seconds
};

// Only succeeded requests enter the latencies and token totals; failures are counted by kind.
Summary summarize(const std::vector<RequestRecord>& records, size_t planned, double duration_s);

// The most requests that were in flight at the same time, from their start and end times.
size_t peak_concurrency(const std::vector<RequestRecord>& records);

}  // namespace spark
