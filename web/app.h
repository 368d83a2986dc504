// app.h — what the HTTP handlers share: the config, the serving state, and the model parts.
#pragma once
#include "engine/config.h"
#include "web/server_state.h"

namespace spark {

class HttpServer;

struct App {
  const Config& config;
  ServerState& state;
  HttpServer& http;
  std::string model_id;  // the served model name
};

}  // namespace spark
