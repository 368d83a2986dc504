// model_router.h — which served model answers a request. Each model keeps its own App (its
// engine, tokenizer, request log, admission count); the router picks one per request from
// the body's "model", or, when the body names none, the first model whose role fits the
// route, and then the route's handler runs with that App as it does with one model.
#pragma once
#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

#include "web/app.h"

namespace spark {

using AppHandler = std::function<void(App&, const httplib::Request&, httplib::Response&)>;
using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;

class ModelRouter {
 public:
  explicit ModelRouter(std::vector<App*> apps);

  const std::vector<App*>& apps() const { return apps_; }
  App& first() const { return *apps_.front(); }

  // The App for a request body: the model it names (its served id, or a GGUF's file name),
  // else the first model whose role is `role` ("chat", "embed", "rerank"; "" = the first
  // model), else the first model (whose handler then refuses the route, naming its role).
  // Throws HttpError 404 model_not_found, listing the served names, for a name none has.
  App& choose(const std::string& body, const std::string& role) const;
  // A route handler that runs `handler` with the App chosen for each request.
  RouteHandler route(const std::string& role, AppHandler handler);

 private:
  std::vector<App*> apps_;
};

}  // namespace spark
