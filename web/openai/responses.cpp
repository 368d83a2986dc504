// responses.cpp — the Responses API framing of a chat turn. Output items open and close as
// the parser's events change kind (reasoning, message text, a function call); the same
// framer builds the stream's events and the whole response, so the two always agree.
#include "web/openai/responses.h"

#include <ctime>

#include "engine/core/engine.h"
#include "web/connection.h"
#include "web/http_error.h"
#include "web/openai/responses_request.h"
#include "web/respond.h"
#include "web/sse.h"
#include "web/turn.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

// The request's tools in the Responses shape, as the response echoes them.
J echoed_tools(const J& body) {
  J out = J::array();
  auto it = body.find("tools");
  if (it == body.end() || !it->is_array()) return out;
  for (const auto& t : *it) {
    J tool{{"type", "function"}, {"name", t.value("name", "")}};
    tool["description"] = t.contains("description") ? t["description"] : J();
    tool["parameters"] = t.contains("parameters") ? t["parameters"] : J();
    tool["strict"] = t.contains("strict") && t["strict"].is_boolean() ? t["strict"] : J(false);
    out.push_back(std::move(tool));
  }
  return out;
}

J setting(const J& body, const char* name, J fallback) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? fallback : *it;
}

class ResponsesFramer : public TurnFramer {
 public:
  ResponsesFramer(App& app, ResponsesRequest request)
      : app_(app), r_(std::move(request)), created_(std::time(nullptr)) {}

  void open(const Turn& turn, std::string* sse) override {
    if (!sse) return;
    emit(sse, "response.created", J{{"response", response(turn, "in_progress")}});
    emit(sse, "response.in_progress", J{{"response", response(turn, "in_progress")}});
  }

  void event(const Turn&, const OutputEvent& e, std::string* sse) override {
    if (e.kind == OutputEvent::TOOL_CALL) {
      close_item(sse);
      J item{{"id", random_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
             {"arguments", ""},        {"call_id", e.call.id},    {"name", e.call.name}};
      const size_t index = output_.size();
      emit(sse, "response.output_item.added", J{{"output_index", index}, {"item", item}});
      emit(sse, "response.function_call_arguments.delta",
           J{{"item_id", item["id"]}, {"output_index", index}, {"delta", e.call.arguments}});
      emit(sse, "response.function_call_arguments.done",
           J{{"item_id", item["id"]}, {"output_index", index}, {"name", e.call.name}, {"arguments", e.call.arguments}});
      item["status"] = "completed";
      item["arguments"] = e.call.arguments;
      emit(sse, "response.output_item.done", J{{"output_index", index}, {"item", item}});
      output_.push_back(std::move(item));
      return;
    }
    const bool reasoning = e.kind == OutputEvent::REASONING;
    if (!open_ || open_reasoning_ != reasoning) open_item(reasoning, sse);
    text_ += e.text;
    emit(sse, reasoning ? "response.reasoning_text.delta" : "response.output_text.delta",
         with_text_fields(
             J{{"item_id", item_["id"]}, {"output_index", output_.size()}, {"content_index", 0}, {"delta", e.text}},
             reasoning));
  }

  void close(const Turn& turn, std::string* sse) override {
    const bool incomplete = turn.result().finish == FinishReason::LENGTH && turn.result().tool_calls.empty();
    close_item(sse, incomplete ? "incomplete" : "completed");
    final_ = response(turn, incomplete ? "incomplete" : "completed");
    // A length cut ends the stream with response.completed too, its status "incomplete":
    // the SDKs' stream helpers and agents wait for response.completed (vLLM does the same).
    emit(sse, "response.completed", J{{"response", final_}});
    if (r_.store) remember(turn);
  }

  void fail(const Turn& turn, const HttpError& error, std::string& sse) override {
    emit(&sse, "error", J{{"code", error.type}, {"message", error.what()}, {"param", nullptr}});
    J failed = response(turn, "failed");
    failed["error"] = J{{"code", "server_error"}, {"message", error.what()}};
    emit(&sse, "response.failed", J{{"response", std::move(failed)}});
  }

  J whole(const Turn&) override { return final_; }

 private:
  // Text deltas and done events carry logprobs (none here); reasoning ones do not.
  static J with_text_fields(J event, bool reasoning) {
    if (!reasoning) event["logprobs"] = J::array();
    return event;
  }

  J part(bool reasoning, const std::string& text) const {
    if (reasoning) return J{{"type", "reasoning_text"}, {"text", text}};
    return J{{"type", "output_text"}, {"annotations", J::array()}, {"logprobs", J::array()}, {"text", text}};
  }

  void open_item(bool reasoning, std::string* sse) {
    close_item(sse);
    open_ = true;
    open_reasoning_ = reasoning;
    text_.clear();
    if (reasoning)
      item_ = J{{"id", random_id("rs_")},
                {"type", "reasoning"},
                {"status", "in_progress"},
                {"summary", J::array()},
                {"content", J::array()}};
    else
      item_ = J{{"id", random_id("msg_")},
                {"type", "message"},
                {"status", "in_progress"},
                {"role", "assistant"},
                {"content", J::array()}};
    const size_t index = output_.size();
    emit(sse, "response.output_item.added", J{{"output_index", index}, {"item", item_}});
    emit(sse, "response.content_part.added",
         J{{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part(reasoning, "")}});
  }

  // `status`: the item ends the response cut short by max_output_tokens ("incomplete").
  void close_item(std::string* sse, const char* status = "completed") {
    if (!open_) return;
    open_ = false;
    const size_t index = output_.size();
    emit(sse, open_reasoning_ ? "response.reasoning_text.done" : "response.output_text.done",
         with_text_fields(J{{"item_id", item_["id"]}, {"output_index", index}, {"content_index", 0}, {"text", text_}},
                          open_reasoning_));
    emit(sse, "response.content_part.done",
         J{{"item_id", item_["id"]},
           {"output_index", index},
           {"content_index", 0},
           {"part", part(open_reasoning_, text_)}});
    item_["status"] = status;
    item_["content"] = J::array({part(open_reasoning_, text_)});
    emit(sse, "response.output_item.done", J{{"output_index", index}, {"item", item_}});
    output_.push_back(std::move(item_));
  }

  // Stream events: the type first and a sequence number that counts every event.
  void emit(std::string* sse, const char* type, J fields) {
    if (!sse) return;
    J event{{"type", type}};
    for (auto& [k, v] : fields.items()) event[k] = std::move(v);
    event["sequence_number"] = sequence_++;
    *sse += sse_named_event(type, event);
  }

  J response(const Turn& turn, const char* status) const {
    const J& b = r_.body;
    J out{{"id", turn.id()}, {"object", "response"}, {"created_at", created_}, {"status", status}};
    out["error"] = nullptr;
    out["incomplete_details"] = std::string(status) == "incomplete" ? J{{"reason", "max_output_tokens"}} : J();
    out["instructions"] = setting(b, "instructions", J());
    out["max_output_tokens"] = setting(b, "max_output_tokens", J());
    out["model"] = app_.model_id;
    out["output"] = std::string(status) == "in_progress" ? J::array() : output_;
    out["parallel_tool_calls"] = setting(b, "parallel_tool_calls", true);
    out["previous_response_id"] = setting(b, "previous_response_id", J());
    out["reasoning"] =
        J{{"effort", setting(setting(b, "reasoning", J::object()), "effort", J())}, {"summary", nullptr}};
    out["store"] = r_.store;
    out["temperature"] = turn.request().params.temperature;
    out["text"] = J{{"format", J{{"type", "text"}}}};
    out["tool_choice"] = setting(b, "tool_choice", J("auto"));
    out["tools"] = echoed_tools(b);
    out["top_p"] = turn.request().params.top_p;
    out["truncation"] = "disabled";
    out["usage"] = std::string(status) == "in_progress" ? J() : usage(turn);
    out["user"] = setting(b, "user", J());
    out["metadata"] = setting(b, "metadata", J::object());
    return out;
  }

  static J usage(const Turn& turn) {
    Usage u = turn.usage();
    return J{{"input_tokens", u.prompt_tokens},
             {"input_tokens_details", J{{"cached_tokens", u.cached_tokens}, {"cache_write_tokens", 0}}},
             {"output_tokens", u.completion_tokens},
             {"output_tokens_details", J{{"reasoning_tokens", turn.reasoning_tokens()}}},
             {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  }

  // This turn as chat messages (its input, then the answer) for previous_response_id.
  void remember(const Turn& turn) {
    auto stored = std::make_shared<StoredResponse>();
    stored->previous = r_.previous;
    stored->messages = r_.new_messages;
    const ChoiceResult& c = turn.result();
    J answer{{"role", "assistant"}, {"content", c.text}};
    if (!c.reasoning.empty()) answer["reasoning_content"] = c.reasoning;
    if (!c.tool_calls.empty()) {
      answer["tool_calls"] = J::array();
      for (const auto& call : c.tool_calls) {
        J args = J::parse(call.arguments, nullptr, false);
        answer["tool_calls"].push_back(
            J{{"id", call.id},
              {"type", "function"},
              {"function", J{{"name", call.name}, {"arguments", args.is_discarded() ? J(call.arguments) : args}}}});
      }
    }
    stored->messages.push_back(std::move(answer));
    app_.responses.put(turn.id(), std::move(stored), size_t(app_.config.server.max_stored_responses));
  }

  App& app_;
  ResponsesRequest r_;
  int64_t created_;
  int64_t sequence_ = 0;
  J output_ = J::array();  // finished items
  bool open_ = false, open_reasoning_ = false;
  J item_;            // the open reasoning or message item
  std::string text_;  // its text so far
  J final_;
};

}  // namespace

void handle_responses(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  require_loaded(app);
  ResponsesRequest r = parse_responses_request(req.body, app.responses, app.engine->vocab_size(), app.model_id);
  ApiRequest chat = r.chat;
  auto framer = std::make_unique<ResponsesFramer>(app, std::move(r));
  TurnPrompt prompt = chat_turn_prompt(app, chat);
  auto turn = std::make_shared<Turn>(app, std::move(chat), random_id("resp_"), std::move(prompt), std::move(framer),
                                     std::make_unique<ConnectionWatch>(req));
  respond(std::move(turn), req, res, std::move(hold));
}

}  // namespace spark
