// request_stream.h — the per-request output channel from the engine thread to the
// thread serving the request: tokens, text deltas, logprobs, finish reason, timings.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/sequence.h"

namespace spark {

using Clock = std::chrono::steady_clock;

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs, most likely first
};

// Steady-clock instants; unset ones are Clock::time_point{}.
struct RequestTimings {
  Clock::time_point queued;       // submit() accepted it
  Clock::time_point scheduled;    // first admitted to a step
  Clock::time_point first_token;
  Clock::time_point last_token;
  Clock::time_point finished;
};

// Everything the engine produced for one request since the previous pop, merged.
struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> token_ids;           // new output tokens
  std::vector<Clock::time_point> token_times;  // when each of them was sampled
  std::string text;                         // new text: whole UTF-8 characters, stop strings removed
  std::vector<TokenLogprob> logprobs;       // one per new token when params.logprobs
  int64_t num_prompt_tokens = 0;            // totals so far
  int64_t num_cached_tokens = 0;            // prompt tokens served from the prefix cache
  int64_t num_output_tokens = 0;
  bool finished = false;
  std::optional<FinishReason> finish_reason;
  std::optional<std::string> stop_string;   // the stop string that ended it
  std::optional<int32_t> stop_token;        // the stop_token_ids entry that ended it
  std::string error;                        // why, when finish_reason == ERROR
  // A last_hidden_state request's result, on its final output: [hidden_size] f32, the
  // final hidden state (after the final norm) of its last prompt token.
  std::vector<float> hidden;
  RequestTimings timings;

  // Appends a later output to this one (the consumer was slower than the engine).
  void merge(RequestOutput&& later);
};

// Single producer (the engine thread), single consumer. Outputs not yet taken are merged,
// so a slow consumer costs memory proportional to its backlog of text, never more items.
class RequestStream {
 public:
  explicit RequestStream(std::string request_id) : request_id_(std::move(request_id)) {}

  // Waits up to `timeout` for output. Returns it (merged), or nullopt on timeout and once
  // the final output (finished == true) has been taken.
  std::optional<RequestOutput> pop(std::chrono::milliseconds timeout);
  // True once the final output has been pushed (it may not be taken yet).
  bool finished() const;
  const std::string& request_id() const { return request_id_; }

  // Engine side.
  void push(RequestOutput out);

 private:
  std::string request_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<RequestOutput> pending_;
  bool closed_ = false;  // the final output was pushed
};

}  // namespace spark
