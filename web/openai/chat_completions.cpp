// chat_completions.cpp — POST /v1/chat/completions: the chat completions framing of a
// turn. Each choice streams a role chunk, then one delta chunk per parsed event (a tool
// call as a head chunk with its id and name, then its arguments), the first chunk of each
// output carrying that output's logprobs, and a finish chunk; the whole answer is built
// from the same results.
#include <ctime>

#include "engine/core/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "web/connection.h"
#include "web/openai/completions.h"
#include "web/openai/openai_framer.h"
#include "web/respond.h"
#include "web/sse.h"
#include "web/turn.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

class ChatCompletionsFramer : public OpenAiFramer {
 public:
  explicit ChatCompletionsFramer(ResponseHead head) : OpenAiFramer(std::move(head), "chat.completion.chunk") {}

  void open(const Turn& turn, std::string*) override { started_.assign(turn.num_choices(), false); }

  void output(const Turn& turn, const ChoiceDelta& d, std::string* sse) override {
    if (!sse) return;
    const ApiRequest& req = turn.request();
    const bool usage_field = req.include_usage;
    if (!started_[d.choice]) *sse += sse_event(chat_chunk(head_, d.choice, J{{"role", "assistant"}, {"content", ""}}, J(), J(), usage_field));
    started_[d.choice] = true;
    J logprobs = req.params.logprobs && !d.logprobs.empty()
                     ? chat_logprobs_json(*turn.app().tokenizer, d.logprobs, req.params.top_logprobs)
                     : J();
    const size_t calls_before = turn.results()[d.choice].tool_calls.size() - count_calls(d);
    size_t k = calls_before;
    for (const auto& e : d.events) {
      J delta = J::object();
      if (e.kind == OutputEvent::CONTENT) {
        delta["content"] = e.text;
      } else if (e.kind == OutputEvent::REASONING) {
        delta["reasoning_content"] = e.text;
      } else {
        J head_delta{{"tool_calls", J::array({J{{"index", k},
                                                 {"id", e.call.id},
                                                 {"type", "function"},
                                                 {"function", J{{"name", e.call.name}, {"arguments", ""}}}}})}};
        *sse += sse_event(chat_chunk(head_, d.choice, std::move(head_delta), J(), J(), usage_field));
        delta["tool_calls"] = J::array({J{{"index", k}, {"function", J{{"arguments", e.call.arguments}}}}});
        ++k;
      }
      *sse += sse_event(chat_chunk(head_, d.choice, std::move(delta), std::move(logprobs), J(), usage_field));
      logprobs = J();
    }
    if (!logprobs.is_null())
      *sse += sse_event(chat_chunk(head_, d.choice, J{{"content", ""}}, std::move(logprobs), J(), usage_field));
  }

  void choice_done(const Turn& turn, size_t choice, std::string* sse) override {
    if (!sse) return;
    *sse += sse_event(chat_chunk(head_, choice, J::object(), J(), finish_reason_text(turn.results()[choice]),
                                 turn.request().include_usage));
  }

  J whole(const Turn& turn) override {
    std::vector<J> logprobs;
    for (const auto& c : turn.results())
      logprobs.push_back(turn.request().params.logprobs
                             ? chat_logprobs_json(*turn.app().tokenizer, c.logprobs, turn.request().params.top_logprobs)
                             : J());
    return chat_response(head_, turn.results(), logprobs, turn.usage());
  }

 private:
  static size_t count_calls(const ChoiceDelta& d) {
    size_t n = 0;
    for (const auto& e : d.events) n += e.kind == OutputEvent::TOOL_CALL;
    return n;
  }

  std::vector<bool> started_;  // per choice: its role chunk went out
};

}  // namespace

void handle_chat_completions(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  require_loaded(app);
  ApiRequest chat = parse_api_request(req.body, ApiKind::CHAT, app.engine->vocab_size(), app.model_id);
  ResponseHead head{random_id("chatcmpl-"), std::time(nullptr), app.model_id};
  TurnPrompt prompt = chat_turn_prompt(app, chat);
  auto turn = std::make_shared<Turn>(app, std::move(chat), head.id, std::move(prompt),
                                     std::make_unique<ChatCompletionsFramer>(head), std::make_unique<ConnectionWatch>(req));
  respond(std::move(turn), req, res, std::move(hold));
}

}  // namespace spark
