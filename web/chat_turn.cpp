// chat_turn.cpp — prompt, generation and parsing of one assistant turn; the stream or the
// whole answer in the framing of the API that asked.
#include "web/chat_turn.h"

#include <chrono>
#include <optional>
#include <random>
#include <utility>

#include "engine/core/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "web/http_error.h"
#include "web/structured_output.h"
#include "web/server.h"
#include "web/sse.h"

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
}

ChatTurn::ChatTurn(App& app, ApiRequest request, std::string id, std::unique_ptr<TurnFramer> framer,
                   const httplib::Request& http)
    : app_(app), req_(std::move(request)), id_(std::move(id)), framer_(std::move(framer)) {
  prompt_ = build_chat_prompt(app_, req_);
  // Harmony is read from its special tokens, so they stay in the text.
  if (prompt_.parser.harmony) req_.params.skip_special_tokens = false;
  std::vector<std::vector<int32_t>> prompts{prompt_.ids};
  check_context(app_, prompts, req_.params, "messages");
  attach_constraint(app_, req_, prompt_.prefill);
  parser_ = std::make_unique<OutputParser>(prompt_.parser);
  gen_ = std::make_unique<Generation>(app_, id_, prompts, 1, req_.params, http);
  // The forced opening of a required tool call is parsed as if the model had written it.
  std::string* sse = req_.stream ? &opening_ : nullptr;
  framer_->open(*this, sse);
  for (const auto& e : parser_->push(prompt_.prefill)) framer_->event(*this, e, sse);
}

Usage ChatTurn::usage() const { return Usage{int64_t(prompt_.ids.size()), output_tokens_, cached_tokens_}; }

int64_t ChatTurn::reasoning_tokens() const {
  if (result_.reasoning.empty()) return 0;
  return int64_t(app_.tokenizer->encode(result_.reasoning, false, false).size());
}

bool ChatTurn::step(std::string* sse, std::optional<HttpError>& failure) {
  std::vector<std::pair<size_t, RequestOutput>> outs;
  Generation::Status status = gen_->poll(outs, kPollWait);
  for (auto& [i, o] : outs) {
    cached_tokens_ = o.num_cached_tokens;
    output_tokens_ = o.num_output_tokens;
    auto events = parser_->push(o.text);
    if (o.finished) {
      auto tail = parser_->finish(o.finish_reason == FinishReason::STOP);
      events.insert(events.end(), tail.begin(), tail.end());
    }
    for (const auto& e : events) {
      if (e.kind == OutputEvent::CONTENT)
        result_.text += e.text;
      else if (e.kind == OutputEvent::REASONING)
        result_.reasoning += e.text;
      else
        result_.tool_calls.push_back(e.call);
      framer_->event(*this, e, sse);
    }
    if (!o.finished) continue;
    result_.finish = o.finish_reason;
    result_.stop_string = o.stop_string;
    if (o.finish_reason == FinishReason::ERROR)
      failure = HttpError(500, o.error.empty() ? "the engine failed" : o.error, "server_error");
    else if (o.finish_reason == FinishReason::ABORT)
      failure = aborted_error();
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
      if (!failure) framer_->close(*this, sse);
      return false;
  }
  return false;
}

class ChatTurn::Stream : public SseProducer {
 public:
  explicit Stream(std::shared_ptr<ChatTurn> turn) : turn_(std::move(turn)) {}
  bool produce(std::string& out) override {
    if (done_) return false;
    if (!turn_->opening_.empty()) out += std::exchange(turn_->opening_, std::string());
    std::optional<HttpError> failure;
    if (turn_->step(&out, failure)) return true;
    done_ = true;
    // A client that hung up reads nothing more; any other failure ends the stream with
    // the API's error event.
    if (failure && failure->status != 499) turn_->framer_->fail(*turn_, *failure, out);
    return false;
  }
  void abandon() override { turn_->gen_->cancel_all(); }

 private:
  std::shared_ptr<ChatTurn> turn_;
  bool done_ = false;
};

void ChatTurn::respond(std::shared_ptr<ChatTurn> turn, const httplib::Request& http, httplib::Response& res,
                       std::shared_ptr<void> hold) {
  if (turn->req_.stream) {
    start_sse(http, res, std::make_shared<Stream>(turn), std::move(hold));
    return;
  }
  std::optional<HttpError> failure;
  while (turn->step(nullptr, failure)) {
  }
  if (failure) throw *failure;
  send_json(res, 200, dump_json(turn->framer_->whole(*turn)));
}

}  // namespace spark
