// model_router.cpp — choosing the App that answers a request (see model_router.h).
#include "web/model_router.h"

#include <nlohmann/json.hpp>

#include "engine/util/check.h"
#include "web/http_error.h"

namespace spark {

ModelRouter::ModelRouter(std::vector<App*> apps) : apps_(std::move(apps)) { SPARK_CHECK(!apps_.empty()); }

App& ModelRouter::choose(const std::string& body, const std::string& role) const {
  // One model: its handler checks the name as it always has (same 404 text, same 400s).
  if (apps_.size() == 1) return *apps_.front();
  // A body that is not JSON, or a "model" that is not a string, goes to the default model,
  // whose handler answers 400 with its usual message.
  const nlohmann::json parsed = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) {
    auto it = parsed.find("model");
    if (it != parsed.end() && it->is_string()) {
      const std::string name = it->get<std::string>();
      for (App* app : apps_)
        if (name == app->model_id || name == app->model_id + ".gguf") return *app;
      std::string served;
      for (App* app : apps_) served += (served.empty() ? "'" : ", '") + app->model_id + "'";
      throw HttpError(404, "The model '" + name + "' does not exist; this server serves " + served,
                      "invalid_request_error", "model", "model_not_found");
    }
  }
  if (!role.empty())
    for (App* app : apps_)
      if (app->config.model.role == role) return *app;
  return *apps_.front();
}

RouteHandler ModelRouter::route(const std::string& role, AppHandler handler) {
  return [this, role, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    handler(choose(req.body, role), req, res);
  };
}

}  // namespace spark
