// completions.cpp — POST /v1/completions: plain prompts (text or token ids, several at
// once, n choices each) run as a turn without a parser, framed as OpenAI's legacy
// text_completion; logprobs carry text offsets counted from the choice's text (after the
// echoed prompt).
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

class CompletionsFramer : public OpenAiFramer {
 public:
  explicit CompletionsFramer(ResponseHead head) : OpenAiFramer(std::move(head), "text_completion") {}

  void open(const Turn& turn, std::string*) override {
    text_offset_.assign(turn.num_choices(), 0);
    for (size_t i = 0; i < text_offset_.size(); ++i) text_offset_[i] = echo_size(turn, i);
  }

  void output(const Turn& turn, const ChoiceDelta& d, std::string* sse) override {
    if (!sse) return;
    const ApiRequest& req = turn.request();
    J logprobs;
    if (req.params.logprobs && !d.logprobs.empty()) {
      logprobs = completion_logprobs_json(*turn.app().tokenizer, d.logprobs, req.completion_logprobs,
                                          text_offset_[d.choice]);
      for (const auto& t : logprobs["tokens"]) text_offset_[d.choice] += t.get<std::string>().size();
    }
    const std::string& text = d.events.front().text;
    if (!text.empty() || !logprobs.is_null())
      *sse += sse_event(completion_chunk(head_, d.choice, text, std::move(logprobs), J(), req.include_usage));
  }

  void choice_done(const Turn& turn, size_t choice, std::string* sse) override {
    if (!sse) return;
    *sse += sse_event(completion_chunk(head_, choice, "", J(), finish_reason_text(turn.results()[choice]),
                                       turn.request().include_usage));
  }

  J whole(const Turn& turn) override {
    std::vector<J> logprobs;
    for (size_t i = 0; i < turn.num_choices(); ++i)
      logprobs.push_back(turn.request().params.logprobs
                             ? completion_logprobs_json(*turn.app().tokenizer, turn.results()[i].logprobs,
                                                        turn.request().completion_logprobs, echo_size(turn, i))
                             : J());
    return completion_response(head_, turn.results(), logprobs, turn.usage());
  }

 private:
  static size_t echo_size(const Turn& turn, size_t choice) {
    const auto& echo = turn.prompt().echo;
    return echo.empty() ? 0 : echo[turn.prompt_of(choice)].size();
  }

  std::vector<size_t> text_offset_;  // per choice: the text before its next logprobs
};

}  // namespace

void handle_completions(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  require_loaded(app);
  ApiRequest r = parse_api_request(req.body, ApiKind::COMPLETION, app.engine->vocab_size(), app.model_id);
  ResponseHead head{random_id("cmpl-"), std::time(nullptr), app.model_id};
  TurnPrompt prompt;
  prompt.param = "prompt";
  for (const auto& text : r.prompt_texts) {
    prompt.ids.push_back(app.tokenizer->encode(text, r.add_special_tokens, /*parse_special=*/true));
    if (r.echo) prompt.echo.push_back(text);
  }
  for (const auto& ids : r.prompt_ids) {
    prompt.ids.push_back(ids);
    if (r.echo) prompt.echo.push_back(app.tokenizer->decode(ids, false));
  }
  auto turn = std::make_shared<Turn>(app, std::move(r), head.id, std::move(prompt),
                                     std::make_unique<CompletionsFramer>(head), std::make_unique<ConnectionWatch>(req));
  respond(std::move(turn), req, res, std::move(hold));
}

}  // namespace spark
