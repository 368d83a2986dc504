// messages.cpp — the Messages API framing of a chat turn. Content blocks open and close as
// the parser's events change kind (thinking, text, a tool call); the same framer builds the
// stream's events and the whole message, so the two always agree.
#include "web/anthropic/messages.h"

#include "engine/core/engine.h"
#include "web/anthropic/messages_request.h"
#include "web/chat_prompt.h"
#include "web/connection.h"
#include "web/http_error.h"
#include "web/respond.h"
#include "web/server.h"
#include "web/sse.h"
#include "web/turn.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

class MessagesFramer : public TurnFramer {
 public:
  void open(const Turn& turn, std::string* sse) override {
    J message{
        {"id", turn.id()},       {"type", "message"},      {"role", "assistant"},     {"model", turn.app().model_id},
        {"content", J::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr}};
    // Before the first token the cache hit is unknown: all input counts as uncached here,
    // and message_delta carries the split.
    message["usage"] = J{{"input_tokens", turn.usage().prompt_tokens},
                         {"output_tokens", 0},
                         {"cache_creation_input_tokens", 0},
                         {"cache_read_input_tokens", 0}};
    emit(sse, "message_start", J{{"message", std::move(message)}});
    emit(sse, "ping", J::object());
  }

  void event(const Turn&, const OutputEvent& e, std::string* sse) override {
    if (e.kind == OutputEvent::TOOL_CALL) {
      close_block(sse);
      J input = J::parse(e.call.arguments, nullptr, false);
      if (input.is_discarded() || !input.is_object()) input = J::object();  // the parser only passes objects
      start_block(J{{"type", "tool_use"}, {"id", e.call.id}, {"name", e.call.name}, {"input", J::object()}}, sse);
      emit(sse, "content_block_delta",
           J{{"index", content_.size()},
             {"delta", J{{"type", "input_json_delta"}, {"partial_json", e.call.arguments}}}});
      block_["input"] = std::move(input);
      close_block(sse);
      return;
    }
    const char* type = e.kind == OutputEvent::REASONING ? "thinking" : "text";
    if (!open_ || block_["type"] != type) {
      close_block(sse);
      start_block(e.kind == OutputEvent::REASONING ? J{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                                   : J{{"type", "text"}, {"text", ""}},
                  sse);
    }
    block_[type] = block_[type].get<std::string>() + e.text;
    J delta = e.kind == OutputEvent::REASONING ? J{{"type", "thinking_delta"}, {"thinking", e.text}}
                                               : J{{"type", "text_delta"}, {"text", e.text}};
    emit(sse, "content_block_delta", J{{"index", content_.size()}, {"delta", std::move(delta)}});
  }

  void close(const Turn& turn, std::string* sse) override {
    close_block(sse);
    const ChoiceResult& c = turn.result();
    stop_reason_ = !c.tool_calls.empty()                           ? "tool_use"
                   : c.stop_string                                 ? "stop_sequence"
                   : c.finish && *c.finish == FinishReason::LENGTH ? "max_tokens"
                                                                   : "end_turn";
    stop_sequence_ = c.stop_string && c.tool_calls.empty() ? J(*c.stop_string) : J();
    usage_ = usage(turn);
    emit(sse, "message_delta",
         J{{"delta", J{{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence_}}}, {"usage", usage_}});
    emit(sse, "message_stop", J::object());
  }

  void fail(const Turn&, const HttpError& error, std::string& sse) override {
    J body = anthropic_error_body(error.status, error.what());
    sse += sse_named_event("error", body);
  }

  J whole(const Turn& turn) override {
    return J{{"id", turn.id()},
             {"type", "message"},
             {"role", "assistant"},
             {"model", turn.app().model_id},
             {"content", content_},
             {"stop_reason", stop_reason_},
             {"stop_sequence", stop_sequence_},
             {"usage", usage_}};
  }

 private:
  // Anthropic counts cache reads apart from input_tokens (their sum is the prompt).
  static J usage(const Turn& turn) {
    Usage u = turn.usage();
    return J{{"input_tokens", u.prompt_tokens - u.cached_tokens},
             {"output_tokens", u.completion_tokens},
             {"cache_creation_input_tokens", 0},
             {"cache_read_input_tokens", u.cached_tokens}};
  }

  void start_block(J block, std::string* sse) {
    open_ = true;
    block_ = std::move(block);
    emit(sse, "content_block_start", J{{"index", content_.size()}, {"content_block", block_}});
  }

  void close_block(std::string* sse) {
    if (!open_) return;
    open_ = false;
    emit(sse, "content_block_stop", J{{"index", content_.size()}});
    content_.push_back(std::move(block_));
  }

  static void emit(std::string* sse, const char* type, J fields) {
    if (!sse) return;
    J event{{"type", type}};
    for (auto& [k, v] : fields.items()) event[k] = std::move(v);
    *sse += sse_named_event(type, event);
  }

  J content_ = J::array();  // finished blocks
  bool open_ = false;
  J block_;  // the open block
  std::string stop_reason_ = "end_turn";
  J stop_sequence_;
  J usage_;
};

}  // namespace

void handle_messages(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  require_loaded(app);
  ApiRequest chat = parse_messages_request(req.body, app.engine->vocab_size(), app.model_id, /*count_only=*/false);
  TurnPrompt prompt = chat_turn_prompt(app, chat);
  auto turn = std::make_shared<Turn>(app, std::move(chat), random_id("msg_"), std::move(prompt),
                                     std::make_unique<MessagesFramer>(), std::make_unique<ConnectionWatch>(req));
  respond(std::move(turn), req, res, std::move(hold));
}

void handle_count_tokens(App& app, const httplib::Request& req, httplib::Response& res) {
  require_loaded(app);
  ApiRequest chat = parse_messages_request(req.body, app.engine->vocab_size(), app.model_id, /*count_only=*/true);
  ChatPrompt prompt = build_chat_prompt(app, chat);
  send_json(res, 200, J{{"input_tokens", prompt.ids.size()}}.dump());
}

}  // namespace spark
