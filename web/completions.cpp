// completions.cpp — one request's life: parse -> prompt ids -> Generation -> per-choice
// text processing (stop strings are the engine's; tool calls and reasoning are split
// here) -> a whole JSON response or SSE chunks as the tokens arrive.
#include "web/completions.h"

#include <chrono>

#include "engine/core/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "web/chat_prompt.h"
#include "web/chat_turn.h"
#include "web/generation.h"
#include "web/http_error.h"
#include "web/openai_request.h"
#include "web/openai_response.h"
#include "web/server.h"
#include "web/sse.h"
#include "web/structured_output.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;
constexpr auto kPollWait = std::chrono::milliseconds(20);

// Everything one API request accumulates; shared by the whole and the streamed answer.
struct Job {
  App& app;
  ApiRequest req;
  ResponseHead head;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_text;  // per prompt, completions with echo
  std::unique_ptr<Generation> gen;
  std::vector<ChoiceResult> results;
  std::vector<std::unique_ptr<OutputParser>> parsers;  // chat only
  std::vector<bool> started;
  std::vector<size_t> text_offset;       // completions logprobs
  std::vector<int64_t> cached, output_tokens;
  std::string error;                      // an engine failure, once any choice hit one
  bool aborted = false;                   // the engine stopped under us

  Job(App& a, ApiRequest r) : app(a), req(std::move(r)) {}

  bool chat() const { return req.kind == ApiKind::CHAT; }

  void start(const httplib::Request& http_req, const std::string& prefill, const OutputParserOptions& popt) {
    const size_t choices = prompts.size() * size_t(req.n);
    results.resize(choices);
    started.assign(choices, false);
    text_offset.assign(choices, 0);
    cached.assign(prompts.size(), 0);
    output_tokens.assign(choices, 0);
    if (chat()) {
      for (size_t i = 0; i < choices; ++i) {
        parsers.push_back(std::make_unique<OutputParser>(popt));
        apply_events(i, parsers.back()->push(prefill), nullptr, J());
      }
    }
    gen = std::make_unique<Generation>(app, head.id, prompts, req.n, req.params, http_req);
  }

  Usage usage() const {
    Usage u;
    for (const auto& p : prompts) u.prompt_tokens += int64_t(p.size());
    for (int64_t c : cached) u.cached_tokens += c;
    for (int64_t o : output_tokens) u.completion_tokens += o;
    return u;
  }

  // Chat events into the choice's result and, when streaming, into delta chunks. The
  // first chunk made carries `logprobs`.
  void apply_events(size_t i, const std::vector<OutputEvent>& events, std::string* sse, J logprobs) {
    ChoiceResult& c = results[i];
    for (const auto& e : events) {
      J delta = J::object();
      if (e.kind == OutputEvent::CONTENT) {
        c.text += e.text;
        delta["content"] = e.text;
      } else if (e.kind == OutputEvent::REASONING) {
        c.reasoning += e.text;
        delta["reasoning_content"] = e.text;
      } else {
        const size_t k = c.tool_calls.size();
        c.tool_calls.push_back(e.call);
        if (sse) {
          J head_delta = J::object();
          head_delta["tool_calls"] = J::array({J{{"index", k},
                                                 {"id", e.call.id},
                                                 {"type", "function"},
                                                 {"function", J{{"name", e.call.name}, {"arguments", ""}}}}});
          *sse += sse_event(chat_chunk(head, i, std::move(head_delta), J(), J(), req.include_usage));
        }
        delta["tool_calls"] = J::array({J{{"index", k}, {"function", J{{"arguments", e.call.arguments}}}}});
      }
      if (sse) {
        *sse += sse_event(chat_chunk(head, i, std::move(delta), std::move(logprobs), J(), req.include_usage));
        logprobs = J();
      }
    }
    if (sse && !logprobs.is_null())
      *sse += sse_event(chat_chunk(head, i, J{{"content", ""}}, std::move(logprobs), J(), req.include_usage));
  }

  void absorb(size_t i, RequestOutput& o, std::string* sse) {
    ChoiceResult& c = results[i];
    const size_t p = gen->prompt_of(i);
    if (i % size_t(req.n) == 0) cached[p] = o.num_cached_tokens;
    output_tokens[i] = o.num_output_tokens;
    const bool want_lp = req.params.logprobs;
    if (want_lp) c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());

    if (chat()) {
      if (sse && !started[i]) *sse += sse_event(chat_chunk(head, i, J{{"role", "assistant"}, {"content", ""}}, J(), J(), req.include_usage));
      started[i] = true;
      auto events = parsers[i]->push(o.text);
      if (o.finished) {
        auto tail = parsers[i]->finish();
        events.insert(events.end(), tail.begin(), tail.end());
      }
      J lp = sse && want_lp && !o.logprobs.empty() ? chat_logprobs_json(*app.tokenizer, o.logprobs, req.params.top_logprobs) : J();
      apply_events(i, events, sse, std::move(lp));
    } else {
      std::string text = std::move(o.text);
      if (!started[i] && req.echo) text = echo_text[p] + text;
      if (!started[i] && req.echo) text_offset[i] = echo_text[p].size();
      started[i] = true;
      c.text += text;
      if (sse) {
        J lp;
        if (want_lp && !o.logprobs.empty()) {
          lp = completion_logprobs_json(*app.tokenizer, o.logprobs, req.completion_logprobs, text_offset[i]);
          for (const auto& t : lp["tokens"]) text_offset[i] += t.get<std::string>().size();
        }
        if (!text.empty() || !lp.is_null()) *sse += sse_event(completion_chunk(head, i, text, std::move(lp), J(), req.include_usage));
      }
    }
    if (!o.finished) return;
    c.finish = o.finish_reason;
    c.stop_string = o.stop_string;
    if (o.finish_reason == FinishReason::ERROR) {
      if (error.empty()) {
        error = o.error.empty() ? "the engine failed" : o.error;
        if (sse) *sse += sse_event(error_body(500, error, "server_error"));
      }
      return;
    }
    if (o.finish_reason == FinishReason::ABORT) {
      aborted = true;
      return;
    }
    if (!sse) return;
    J reason = finish_reason_text(c);
    if (chat()) *sse += sse_event(chat_chunk(head, i, J::object(), J(), reason, req.include_usage));
    else *sse += sse_event(completion_chunk(head, i, "", J(), reason, req.include_usage));
  }

  std::vector<J> logprobs_json() const {
    std::vector<J> out;
    for (size_t i = 0; i < results.size(); ++i) {
      if (!req.params.logprobs) {
        out.push_back(J());
      } else if (chat()) {
        out.push_back(chat_logprobs_json(*app.tokenizer, results[i].logprobs, req.params.top_logprobs));
      } else {
        size_t offset = req.echo ? echo_text[gen->prompt_of(i)].size() : 0;
        out.push_back(completion_logprobs_json(*app.tokenizer, results[i].logprobs, req.completion_logprobs, offset));
      }
    }
    return out;
  }

  std::string timeout_message() const {
    return "the request took longer than server.request_timeout_s (" + J(gen->timeout_s()).dump() + " s) and was cancelled";
  }
};

class JobStream : public SseProducer {
 public:
  explicit JobStream(std::shared_ptr<Job> job) : job_(std::move(job)) {}
  bool produce(std::string& out) override {
    if (done_) return false;
    std::vector<std::pair<size_t, RequestOutput>> outs;
    Generation::Status status = job_->gen->poll(outs, kPollWait);
    for (auto& [i, o] : outs) job_->absorb(i, o, &out);
    switch (status) {
      case Generation::Status::RUNNING:
        return true;
      case Generation::Status::DISCONNECTED:
        done_ = true;
        return false;
      case Generation::Status::TIMED_OUT:
        out += sse_event(error_body(408, job_->timeout_message(), "timeout_error"));
        break;
      case Generation::Status::DONE:
        if (job_->aborted && job_->error.empty())
          out += sse_event(error_body(503, "the request was aborted: the engine stopped", "service_unavailable_error"));
        else if (job_->req.include_usage && job_->error.empty())
          out += sse_event(usage_chunk(job_->head, job_->chat() ? "chat.completion.chunk" : "text_completion", job_->usage()));
        break;
    }
    out += kSseDone;
    done_ = true;
    return false;
  }
  void abandon() override {
    if (job_->gen) job_->gen->cancel_all();
  }

 private:
  std::shared_ptr<Job> job_;
  bool done_ = false;
};

void run(std::shared_ptr<Job> job, const httplib::Request& req, httplib::Response& res, std::shared_ptr<void> hold) {
  if (job->req.stream) {
    start_sse(req, res, std::make_shared<JobStream>(job), std::move(hold));
    return;
  }
  for (;;) {
    std::vector<std::pair<size_t, RequestOutput>> outs;
    Generation::Status status = job->gen->poll(outs, kPollWait);
    for (auto& [i, o] : outs) job->absorb(i, o, nullptr);
    if (status == Generation::Status::RUNNING) continue;
    if (status == Generation::Status::DISCONNECTED) {
      send_json(res, 499, error_body(499, "the client closed the connection", "invalid_request_error").dump());
      return;
    }
    if (status == Generation::Status::TIMED_OUT) throw HttpError(408, job->timeout_message(), "timeout_error");
    break;
  }
  if (!job->error.empty()) throw HttpError(500, job->error, "server_error");
  if (job->aborted) throw HttpError(503, "the request was aborted: the engine stopped", "service_unavailable_error");
  J body = job->chat() ? chat_response(job->head, job->results, job->logprobs_json(), job->usage())
                       : completion_response(job->head, job->results, job->logprobs_json(), job->usage());
  send_json(res, 200, dump_json(body));
}

}  // namespace

void handle_chat_completions(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  require_loaded(app);
  auto job = std::make_shared<Job>(app, parse_api_request(req.body, ApiKind::CHAT, app.engine->vocab_size(), app.model_id));
  job->head = {random_id("chatcmpl-"), std::time(nullptr), app.model_id};
  ChatPrompt prompt = build_chat_prompt(app, job->req);
  job->prompts.push_back(std::move(prompt.ids));
  check_context(app, job->prompts, job->req.params, "messages");
  attach_constraint(app, job->req, prompt.prefill);
  job->start(req, prompt.prefill, prompt.parser);
  run(job, req, res, std::move(hold));
}

void handle_completions(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  require_loaded(app);
  auto job = std::make_shared<Job>(app, parse_api_request(req.body, ApiKind::COMPLETION, app.engine->vocab_size(), app.model_id));
  job->head = {random_id("cmpl-"), std::time(nullptr), app.model_id};
  for (const auto& text : job->req.prompt_texts) {
    job->prompts.push_back(app.tokenizer->encode(text, job->req.add_special_tokens, /*parse_special=*/true));
    job->echo_text.push_back(text);
  }
  for (const auto& ids : job->req.prompt_ids) {
    job->prompts.push_back(ids);
    job->echo_text.push_back(job->req.echo ? app.tokenizer->decode(ids, false) : "");
  }
  check_context(app, job->prompts, job->req.params, "prompt");
  attach_constraint(app, job->req, "");
  job->start(req, "", OutputParserOptions{});
  run(job, req, res, std::move(hold));
}

}  // namespace spark
