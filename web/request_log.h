// request_log.h — the recent-requests ring the dashboard shows: one record per API request,
// fed by the API handlers at start, on output and at finish.
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/request_stream.h"

namespace spark {

struct RequestLogEntry {
  std::string id;
  std::string status;  // "queued", "running", "finished", "failed"
  int64_t started_unix_ms = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t generated_tokens = 0;
  double ttft_s = -1;  // -1: not known (yet)
  double tpot_s = -1;
  double e2e_s = -1;
  std::string finish_reason;  // "stop", "length", "abort", "error"; "" while live
  std::string error;
  uint64_t version = 0;  // the log's change counter when this record last changed
  Clock::time_point started;
};

// One finished request's latencies, for the dashboard's percentile series.
struct LatencySample {
  Clock::time_point finished;
  double ttft_s = -1;
  double tpot_s = -1;  // -1 when fewer than two tokens were generated
};

class RequestLog {
 public:
  RequestLog() : RequestLog(200) {}
  explicit RequestLog(size_t capacity);

  // The handler accepted a request (after the engine took it).
  void start(const std::string& id, int64_t prompt_tokens);
  // Output arrived; cheap enough to call on every delta (first token, running counts).
  void progress(const std::string& id, const RequestOutput& out);
  // The engine's final output (finished == true).
  void finish(const std::string& id, const RequestOutput& out);
  // The request ended without a final engine output (client gone, handler error).
  void fail(const std::string& id, const std::string& finish_reason, const std::string& error);

  // Records changed after `version`, oldest change first; `latest` receives the newest version.
  std::vector<RequestLogEntry> changed_since(uint64_t version, uint64_t* latest) const;
  std::vector<RequestLogEntry> recent() const;  // every kept record, newest first
  uint64_t version() const;
  // Latencies of requests that finished at or after `since`.
  std::vector<LatencySample> latencies_since(Clock::time_point since) const;

 private:
  RequestLogEntry* find(const std::string& id);  // mu_ held
  void touch(RequestLogEntry& r);                // mu_ held

  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<RequestLogEntry> records_;   // oldest first
  std::deque<LatencySample> latencies_;  // oldest first, pruned by age and count
  uint64_t version_ = 0;
};

}  // namespace spark
