// turn.h — one generation request's life, shared by every generating route (chat
// completions, completions, Responses, Messages): context check, constraint, submission of
// n choices per prompt, the per-choice reasoning / content / tool-call parser (chat), the
// wait for output while watching the client and the deadline, and the failures. A
// TurnFramer turns what the turn produces into one API's stream events and whole response,
// so a streamed answer and a whole one are built by the same code. No HTTP type appears
// here (web/respond.h sends a turn over HTTP).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "web/app.h"
#include "web/client_link.h"
#include "web/generation.h"
#include "web/http_error.h"
#include "web/openai_request.h"
#include "web/openai_response.h"

namespace spark {

class Turn;

// What one poll brought for one choice: parsed events (chat), or for a plain prompt the
// new text as one CONTENT event (with the echoed prompt first on its first output); and
// the logprobs of the tokens behind it when the request asked for them.
struct ChoiceDelta {
  size_t choice = 0;
  std::vector<OutputEvent> events;
  std::vector<TokenLogprob> logprobs;
};

// One API's framing. `sse` is null when the answer is sent whole: the framer then only
// accumulates. Calls come in order: open, then output and choice_done per choice, then close
// (or fail), then whole.
class TurnFramer {
 public:
  virtual ~TurnFramer() = default;
  virtual void open(const Turn& turn, std::string* sse) = 0;
  // Framers of one-choice APIs that care only for events override event().
  virtual void output(const Turn& turn, const ChoiceDelta& delta, std::string* sse) {
    for (const auto& e : delta.events) event(turn, e, sse);
  }
  virtual void event(const Turn& turn, const OutputEvent& e, std::string* sse) {}
  // A choice finished normally (stop, length, stop string or tool calls).
  virtual void choice_done(const Turn& turn, size_t choice, std::string* sse) {}
  // Every choice finished normally.
  virtual void close(const Turn& turn, std::string* sse) = 0;
  // The stream must end with an error (engine failure, timeout, shutdown).
  virtual void fail(const Turn& turn, const HttpError& error, std::string& sse) = 0;
  virtual nlohmann::ordered_json whole(const Turn& turn) = 0;
};

// The prompts of a turn and how its answers are read.
struct TurnPrompt {
  std::vector<std::vector<int32_t>> ids;
  const char* param = "messages";  // the request field a context error names
  // Chat: answer text the prompt already holds (the forced opening of a required tool
  // call), parsed as if the model had written it, and how answers are split. Absent for a
  // plain prompt, whose text is returned as it comes.
  std::optional<OutputParserOptions> parser;
  std::string prefill;
  std::vector<std::string> echo;  // per prompt: text put before its choices' text (completions' echo)
};

// The prompt of a chat request (the model's chat template; see chat_prompt.h).
TurnPrompt chat_turn_prompt(const App& app, ApiRequest& request);

class Turn {
 public:
  // Checks the prompts against the context, attaches the request's constraint and submits
  // n choices per prompt. Throws HttpError for what the context or the admission refuses.
  Turn(App& app, ApiRequest request, std::string id, TurnPrompt prompt, std::unique_ptr<TurnFramer> framer,
       std::unique_ptr<ClientLink> client);

  // Polls the generation once, feeding what arrives through the parsers and the framer.
  // Returns false once the turn is over; `failure` is then set when it ended badly.
  bool step(std::string* sse, std::optional<HttpError>& failure);
  // The framer's first events and the prefill's, before any output (streams only).
  std::string take_opening() { return std::exchange(opening_, std::string()); }
  void fail(const HttpError& error, std::string& sse) { framer_->fail(*this, error, sse); }
  nlohmann::ordered_json whole() { return framer_->whole(*this); }
  void cancel() { gen_->cancel_all(); }

  const App& app() const { return app_; }
  const ApiRequest& request() const { return req_; }
  const std::string& id() const { return id_; }
  const TurnPrompt& prompt() const { return prompt_; }
  size_t num_choices() const { return results_.size(); }
  size_t prompt_of(size_t choice) const { return choice / size_t(req_.n); }
  const std::vector<ChoiceResult>& results() const { return results_; }
  const ChoiceResult& result() const { return results_.front(); }  // one-choice APIs
  Usage usage() const;
  // Tokens of the first choice's reasoning (re-encoded: the engine counts tokens, not
  // their kind).
  int64_t reasoning_tokens() const;

 private:
  void deliver(ChoiceDelta delta, std::string* sse);

  App& app_;
  ApiRequest req_;
  std::string id_;
  TurnPrompt prompt_;
  std::unique_ptr<TurnFramer> framer_;
  std::unique_ptr<ClientLink> client_;  // before gen_, which watches it
  std::vector<std::unique_ptr<OutputParser>> parsers_;  // per choice; none for a plain prompt
  std::unique_ptr<Generation> gen_;
  std::vector<ChoiceResult> results_;
  std::vector<bool> started_;
  std::vector<int64_t> cached_tokens_, output_tokens_;  // per prompt, per choice
  std::optional<HttpError> failure_;  // the first failure of any choice
  std::string opening_;
};

// The random part of an id: prefix + 24 hex digits ("chatcmpl-", "resp_", "msg_", ...).
std::string random_id(const char* prefix);

// 503 while the model loads; 400 when the model is an embedder or reranker.
void require_loaded(const App& app);

}  // namespace spark
