// info_handlers.cpp — model listing, Prometheus metrics, tokenize and detokenize.
#include "web/info_handlers.h"

#include "engine/core/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "web/chat_prompt.h"
#include "web/http_error.h"
#include "web/metrics_text.h"
#include "web/openai_request.h"
#include "web/openai_response.h"
#include "web/server.h"

namespace spark {
namespace {

using J = nlohmann::ordered_json;

void require_loaded(const App& app) {
  if (!app.engine || !app.tokenizer) throw HttpError(503, "the model is not loaded yet", "service_unavailable_error");
}

}  // namespace

void handle_models(const std::vector<App*>& apps, const httplib::Request&, httplib::Response& res) {
  J data = J::array();
  for (const App* app : apps) {
    require_loaded(*app);
    J model = J::object();
    model["id"] = app->model_id;
    model["object"] = "model";
    model["created"] = app->created;
    model["owned_by"] = "sparkd";
    model["root"] = app->config.model.path;
    model["parent"] = nullptr;
    model["max_model_len"] = app->engine->max_model_len();
    data.push_back(std::move(model));
  }
  J body = J::object();
  body["object"] = "list";
  body["data"] = std::move(data);
  send_json(res, 200, dump_json(body));
}

void handle_metrics(const std::vector<App*>& apps, const httplib::Request&, httplib::Response& res) {
  std::vector<ModelMetrics> models;
  for (const App* app : apps) {
    ModelMetrics m;
    if (app->engine) m.snapshot = app->engine->metrics();
    // The HTTP count and readiness are the server's, the same under every model's label.
    m.server.http_in_flight = app->state.in_flight();
    m.server.sequences_admitted = app->sequences_in_flight.load();
    m.server.ready = app->state.status() == ServeStatus::READY;
    m.model_name = app->model_id;
    models.push_back(std::move(m));
  }
  res.status = 200;
  res.set_content(metrics_text(models, apps.front()->http.replica()), "text/plain; version=0.0.4; charset=utf-8");
}

void handle_tokenize(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  require_loaded(app);
  J body = parse_json_body(req.body);
  check_model(body, app.model_id);
  std::vector<int32_t> ids;
  bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
  bool has_messages = body.contains("messages") && !body["messages"].is_null();
  if (has_prompt == has_messages)
    throw HttpError(400, "give exactly one of 'prompt' (text) or 'messages' (a chat)", "invalid_request_error", "prompt");
  if (has_prompt) {
    if (!body["prompt"].is_string()) throw HttpError(400, "'prompt' must be a string", "invalid_request_error", "prompt");
    ids = app.tokenizer->encode(body["prompt"].get<std::string>(), field_bool(body, "add_special_tokens", true), true);
  } else {
    J chat = body;
    chat.erase("add_special_tokens");
    ApiRequest r = parse_api_request(chat.dump(), ApiKind::CHAT, app.engine->vocab_size(), app.model_id);
    ChatPrompt p = build_chat_prompt(app, r);
    ids = std::move(p.ids);
    if (field_bool(body, "add_special_tokens", false)) {
      std::vector<int32_t> with = app.tokenizer->encode(p.text, true, true);
      ids = std::move(with);
    }
  }
  J out = J::object();
  out["count"] = ids.size();
  out["max_model_len"] = app.engine->max_model_len();
  out["tokens"] = ids;
  out["token_strs"] = nullptr;
  send_json(res, 200, dump_json(out));
}

void handle_detokenize(App& app, const httplib::Request& req, httplib::Response& res) {
  auto hold = app.state.track_request();
  require_loaded(app);
  J body = parse_json_body(req.body);
  check_model(body, app.model_id);
  if (!body.contains("tokens") || body["tokens"].is_null())
    throw HttpError(400, "'tokens' is required", "invalid_request_error", "tokens");
  std::vector<int32_t> ids = field_token_ids(body["tokens"], "tokens", app.engine->vocab_size());
  J out = J::object();
  out["prompt"] = app.tokenizer->decode(ids, field_bool(body, "skip_special_tokens", false));
  send_json(res, 200, dump_json(out));
}

}  // namespace spark
