// chat_turn.h — one assistant turn (a single choice) for the APIs that frame chat output
// their own way: the Responses API and the Messages API. The turn is the chat completions
// machinery (chat template, context check, Generation, the reasoning / content / tool-call
// parser); a TurnFramer turns its output events into that API's stream events and whole
// response, so a streamed answer and a whole one are built by the same code.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "web/app.h"
#include "web/chat_prompt.h"
#include "web/generation.h"
#include "web/http_error.h"
#include "web/openai_request.h"
#include "web/openai_response.h"

namespace spark {

class ChatTurn;

// One API's framing. `sse` is null when the answer is sent whole: the framer then only
// accumulates. Calls come in order: open, event*, close (or fail), then whole.
class TurnFramer {
 public:
  virtual ~TurnFramer() = default;
  virtual void open(const ChatTurn& turn, std::string* sse) = 0;
  virtual void event(const ChatTurn& turn, const OutputEvent& e, std::string* sse) = 0;
  // The turn finished normally (stop, length, stop string or tool calls).
  virtual void close(const ChatTurn& turn, std::string* sse) = 0;
  // The stream must end with an error (engine failure, timeout, shutdown).
  virtual void fail(const ChatTurn& turn, const HttpError& error, std::string& sse) = 0;
  virtual nlohmann::ordered_json whole(const ChatTurn& turn) = 0;
};

class ChatTurn {
 public:
  // Renders the prompt, checks it against the context and submits it. Throws HttpError
  // for what the template, the context or the admission refuses.
  ChatTurn(App& app, ApiRequest request, std::string id, std::unique_ptr<TurnFramer> framer,
           const httplib::Request& http);

  // Sends the answer: an SSE stream when the request asked for one, else the whole JSON
  // (or an HttpError for the route's error wrapper). `hold` keeps a draining server up.
  static void respond(std::shared_ptr<ChatTurn> turn, const httplib::Request& http, httplib::Response& res,
                      std::shared_ptr<void> hold);

  const ApiRequest& request() const { return req_; }
  const std::string& id() const { return id_; }
  const ChoiceResult& result() const { return result_; }
  const App& app() const { return app_; }
  Usage usage() const;
  // Tokens of the reasoning text (re-encoded: the engine counts tokens, not their kind).
  int64_t reasoning_tokens() const;

 private:
  class Stream;
  // Polls the generation once, feeding what arrives through the parser and the framer.
  // Returns false once the turn is over; `failure` is then set when it ended badly.
  bool step(std::string* sse, std::optional<HttpError>& failure);

  App& app_;
  ApiRequest req_;
  std::string id_;
  std::unique_ptr<TurnFramer> framer_;
  ChatPrompt prompt_;
  std::unique_ptr<OutputParser> parser_;
  std::unique_ptr<Generation> gen_;
  ChoiceResult result_;
  int64_t cached_tokens_ = 0, output_tokens_ = 0;
  std::string opening_;  // the framer's first events and the prefill's, before any output
};

// The random part of an id: prefix + 24 hex digits ("resp_", "msg_", ...).
std::string random_id(const char* prefix);

// 503 while the model loads.
void require_loaded(const App& app);

}  // namespace spark
