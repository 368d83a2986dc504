// generation.cpp — admission, submission and the wait loop of one API request.
#include "web/generation.h"

#include "engine/util/check.h"
#include "web/http_error.h"

namespace spark {

void check_context(const App& app, const std::vector<std::vector<int32_t>>& prompts, const SamplingParams& params,
                   const char* prompt_param) {
  for (const auto& ids : prompts) {
    try {
      app.engine->admission().check(ids, params);
    } catch (const ContextLengthError& e) {
      // OpenAI's wording, with the numbers the engine's admission found.
      const int64_t asked = e.max_tokens.value_or(1);
      const std::string msg =
          "This model's maximum context length is " + std::to_string(e.max_model_len) + " tokens. However, you requested " +
          std::to_string(e.prompt_tokens + asked) + " tokens (" + std::to_string(e.prompt_tokens) + " in the " +
          (std::string(prompt_param) == "messages" ? "messages" : "prompt") + ", " + std::to_string(asked) +
          " in the completion). Please reduce the length of the " + prompt_param + " or completion.";
      throw HttpError(400, msg, "invalid_request_error",
                      e.max_tokens && e.prompt_tokens < e.max_model_len ? "max_tokens" : prompt_param,
                      "context_length_exceeded");
    } catch (const InputError& e) {
      throw HttpError(400, e.what(), "invalid_request_error", ids.empty() ? prompt_param : "");
    }
  }
}

Generation::Generation(App& app, const std::string& id, const std::vector<std::vector<int32_t>>& prompts, int64_t n,
                       const SamplingParams& params, const ClientLink& client, bool last_hidden_state)
    : app_(app), n_(n), client_(client) {
  const int64_t total = static_cast<int64_t>(prompts.size()) * n;
  const int64_t limit = app.config.engine.max_num_seqs + app.config.server.max_queued_requests;
  const int64_t before = app.sequences_in_flight.fetch_add(total);
  admitted_ = total;
  if (before > 0 && before + total > limit) {
    app.sequences_in_flight.fetch_sub(total);
    admitted_ = 0;
    throw HttpError(429,
                    "the server is busy: " + std::to_string(before) + " sequences are running or queued and the limit is " +
                        std::to_string(limit) + " (engine.max_num_seqs + server.max_queued_requests); retry later",
                    "rate_limit_error", "", "too_many_requests");
  }
  deadline_ = Clock::now() + std::chrono::milliseconds(int64_t(app.config.server.request_timeout_s * 1000));
  try {
    for (size_t p = 0; p < prompts.size(); ++p)
      for (int64_t i = 0; i < n; ++i) {
        Request r;
        const size_t choice = p * size_t(n) + size_t(i);
        r.request_id = id + "-" + std::to_string(choice);
        r.prompt_ids = prompts[p];
        r.params = params;
        r.last_hidden_state = last_hidden_state;
        if (params.seed) r.params.seed = *params.seed + uint64_t(choice);
        streams_.push_back(app.engine->submit(std::move(r)));
        finished_.push_back(false);
        app.requests.start(streams_.back()->request_id(), int64_t(prompts[p].size()));  // dashboard
      }
  } catch (...) {
    // The constructor does not finish, so the destructor will not run: cancel what was
    // submitted and give the admission back here.
    cancel_all();
    for (const auto& stream : streams_) app.requests.fail(stream->request_id(), "abort", "a sibling choice was refused");
    app.sequences_in_flight.fetch_sub(admitted_);
    admitted_ = 0;
    try {
      throw;
    } catch (const InputError& e) {
      throw HttpError(400, e.what(), "invalid_request_error");
    } catch (const HttpError&) {
      throw;
    } catch (const std::exception& e) {
      throw HttpError(503, std::string("the engine accepts no requests: ") + e.what(), "service_unavailable_error");
    }
  }
}

Generation::~Generation() {
  for (size_t i = 0; i < streams_.size(); ++i) {  // the dashboard's record of what ended early
    if (finished_[i]) continue;
    const char* why = client_.closed()              ? "the client disconnected"
                      : Clock::now() > deadline_ ? "server.request_timeout_s passed"
                                                 : "ended early";
    if (auto o = streams_[i]->pop(std::chrono::milliseconds(0)); o && o->finished) {
      // The engine finished it first, either on its own or already obeying poll()'s cancel.
      if (o->finish_reason == FinishReason::ABORT && o->error.empty()) o->error = why;
      app_.requests.finish(streams_[i]->request_id(), *o);
    } else {
      app_.requests.fail(streams_[i]->request_id(), "abort", why);
    }
  }
  cancel_all();
  if (admitted_ > 0) app_.sequences_in_flight.fetch_sub(admitted_);
}

double Generation::timeout_s() const { return app_.config.server.request_timeout_s; }

void Generation::cancel_all() {
  for (size_t i = 0; i < streams_.size(); ++i)
    if (!finished_[i] && !streams_[i]->finished()) app_.engine->cancel(streams_[i]->request_id());
}

Generation::Status Generation::poll(std::vector<std::pair<size_t, RequestOutput>>& out, std::chrono::milliseconds wait) {
  bool waited = false;
  bool all_done = true;
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (finished_[i]) continue;
    all_done = false;
    auto o = streams_[i]->pop(waited ? std::chrono::milliseconds(0) : wait);
    waited = true;
    if (!o) continue;
    if (o->finished) finished_[i] = true;
    if (o->finished) app_.requests.finish(streams_[i]->request_id(), *o);  // dashboard
    else app_.requests.progress(streams_[i]->request_id(), *o);
    out.emplace_back(i, std::move(*o));
  }
  if (all_done) return Status::DONE;
  bool now_done = true;
  for (bool f : finished_) now_done = now_done && f;
  if (now_done) return Status::DONE;
  if (client_.closed()) {
    cancel_all();
    return Status::DISCONNECTED;
  }
  if (Clock::now() > deadline_) {
    cancel_all();
    return Status::TIMED_OUT;
  }
  return Status::RUNNING;
}

}  // namespace spark
