// generation.h — the engine side of one API request: admission (429 past the queue
// limit), one engine request per prompt and choice, waiting for their outputs while
// watching the client (it must outlive the Generation) and the request deadline, and
// cancelling on exit.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/engine.h"
#include "web/app.h"
#include "web/client_link.h"

namespace spark {

class Generation {
 public:
  enum class Status { RUNNING, DONE, DISCONNECTED, TIMED_OUT };

  // Submits n requests for each prompt (choice index = prompt * n + i; with a seed,
  // choice i samples with seed + i). Throws HttpError 429 when the engine's queue is
  // full, 503 when the engine does not accept work, 400 for what the engine refuses.
  // last_hidden_state: prompt-only requests, each finishing with its pooled token's final
  // hidden state (Request::last_hidden_state).
  Generation(App& app, const std::string& id, const std::vector<std::vector<int32_t>>& prompts, int64_t n,
             const SamplingParams& params, const ClientLink& client, bool last_hidden_state = false);
  ~Generation();  // cancels whatever still runs and returns the admission
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Waits up to `wait` for output; appends (choice, output) pairs. DISCONNECTED and
  // TIMED_OUT cancel every choice first.
  Status poll(std::vector<std::pair<size_t, RequestOutput>>& out, std::chrono::milliseconds wait);
  size_t num_choices() const { return streams_.size(); }
  size_t prompt_of(size_t choice) const { return choice / size_t(n_); }
  double timeout_s() const;
  void cancel_all();

 private:
  App& app_;
  int64_t n_;
  int64_t admitted_ = 0;
  std::vector<std::shared_ptr<RequestStream>> streams_;
  std::vector<bool> finished_;
  const ClientLink& client_;
  Clock::time_point deadline_;
};

// Runs the engine's admission before anything is submitted, so that a prompt too long
// for the context is refused as OpenAI words it (400 context_length_exceeded with the
// numbers) and any other refusal as a 400 naming it.
void check_context(const App& app, const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params,
                   const char* prompt_param);

}  // namespace spark
