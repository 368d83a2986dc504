// turn.cpp — prompt checks, submission, parsing and failures of one generation request;
// its output handed to the framing of the API that asked.
#include "web/turn.h"

#include "web/pooled.h"

#include <chrono>
#include <random>
#include <utility>

#include "engine/core/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "web/chat_prompt.h"
#include "web/structured_output.h"

namespace spark {
namespace {

constexpr auto kPollWait = std::chrono::milliseconds(20);

HttpError aborted_error() {
  return HttpError(503, "the request was aborted: the engine stopped", "service_unavailable_error");
}

}  // namespace

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
  return id;
}

void require_loaded(const App& app) {
  if (!app.engine || !app.tokenizer) throw HttpError(503, "the model is not loaded yet", "service_unavailable_error");
  if (app.pooling) throw HttpError(400, pooled_role_message(app), "invalid_request_error", "model");
}

TurnPrompt chat_turn_prompt(const App& app, ApiRequest& request) {
  ChatPrompt chat = build_generation_prompt(app, request);
  TurnPrompt p;
  p.ids.push_back(std::move(chat.ids));
  p.parser = chat.parser;
  p.prefill = std::move(chat.prefill);
  return p;
}

Turn::Turn(App& app, ApiRequest request, std::string id, TurnPrompt prompt, std::unique_ptr<TurnFramer> framer,
           std::unique_ptr<ClientLink> client)
    : app_(app),
      req_(std::move(request)),
      id_(std::move(id)),
      prompt_(std::move(prompt)),
      framer_(std::move(framer)),
      client_(std::move(client)) {
  check_context(app_, prompt_.ids, req_.params, prompt_.param);
  attach_constraint(app_, req_, prompt_.prefill);
  const size_t choices = prompt_.ids.size() * size_t(req_.n);
  results_.resize(choices);
  started_.assign(choices, false);
  cached_tokens_.assign(prompt_.ids.size(), 0);
  output_tokens_.assign(choices, 0);
  gen_ = std::make_unique<Generation>(app_, id_, prompt_.ids, req_.n, req_.params, *client_);
  std::string* sse = req_.stream ? &opening_ : nullptr;
  framer_->open(*this, sse);
  if (!prompt_.parser) return;
  // The forced opening of a required tool call is parsed as if the model had written it.
  for (size_t i = 0; i < choices; ++i) {
    parsers_.push_back(make_output_parser(*prompt_.parser));
    auto events = parsers_.back()->push(prompt_.prefill);
    if (!events.empty()) deliver(ChoiceDelta{i, std::move(events), {}}, sse);
  }
}

Usage Turn::usage() const {
  Usage u;
  for (const auto& p : prompt_.ids) u.prompt_tokens += int64_t(p.size());
  for (int64_t c : cached_tokens_) u.cached_tokens += c;
  for (int64_t o : output_tokens_) u.completion_tokens += o;
  return u;
}

int64_t Turn::reasoning_tokens() const {
  if (result().reasoning.empty()) return 0;
  return int64_t(app_.tokenizer->encode(result().reasoning, false, false).size());
}

void Turn::deliver(ChoiceDelta delta, std::string* sse) {
  ChoiceResult& c = results_[delta.choice];
  for (const auto& e : delta.events) {
    if (e.kind == OutputEvent::CONTENT) c.text += e.text;
    else if (e.kind == OutputEvent::REASONING) c.reasoning += e.text;
    else c.tool_calls.push_back(e.call);
  }
  c.logprobs.insert(c.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
  framer_->output(*this, delta, sse);
}

bool Turn::step(std::string* sse, std::optional<HttpError>& failure) {
  std::vector<std::pair<size_t, RequestOutput>> outs;
  Generation::Status status = gen_->poll(outs, kPollWait);
  for (auto& [i, o] : outs) {
    if (i % size_t(req_.n) == 0) cached_tokens_[prompt_of(i)] = o.num_cached_tokens;
    output_tokens_[i] = o.num_output_tokens;
    ChoiceDelta delta{i, {}, req_.params.logprobs ? std::move(o.logprobs) : std::vector<TokenLogprob>{}};
    if (parsers_.empty()) {
      std::string text = std::move(o.text);
      if (!started_[i] && !prompt_.echo.empty()) text = prompt_.echo[prompt_of(i)] + text;
      delta.events.push_back(OutputEvent{OutputEvent::CONTENT, std::move(text), {}});
    } else {
      delta.events = parsers_[i]->push(o.text);
      if (o.finished) {
        auto tail = parsers_[i]->finish(o.finish_reason == FinishReason::STOP);
        delta.events.insert(delta.events.end(), tail.begin(), tail.end());
      }
    }
    started_[i] = true;
    deliver(std::move(delta), sse);
    if (!o.finished) continue;
    ChoiceResult& c = results_[i];
    c.finish = o.finish_reason;
    c.stop_string = o.stop_string;
    if (o.finish_reason == FinishReason::ERROR) {
      // The first engine failure is the one reported, before a shutdown's aborts.
      if (!failure_ || failure_->status != 500)
        failure_ = HttpError(500, o.error.empty() ? "the engine failed" : o.error, "server_error");
    } else if (o.finish_reason == FinishReason::ABORT) {
      if (!failure_) failure_ = aborted_error();
    } else {
      framer_->choice_done(*this, i, sse);
    }
  }
  switch (status) {
    case Generation::Status::RUNNING:
      return true;
    case Generation::Status::DISCONNECTED:
      failure = HttpError(499, "the client closed the connection", "invalid_request_error");
      return false;
    case Generation::Status::TIMED_OUT:
      failure = HttpError(408,
                          "the request took longer than server.request_timeout_s (" +
                              nlohmann::json(gen_->timeout_s()).dump() + " s) and was cancelled",
                          "timeout_error");
      return false;
    case Generation::Status::DONE:
      failure = failure_;
      if (!failure) framer_->close(*this, sse);
      return false;
  }
  return false;
}

}  // namespace spark
