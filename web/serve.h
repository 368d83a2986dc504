// serve.h — `sparkd serve`: load the model, start the engine and the HTTP server, run
// until SIGTERM drains it. Returns the exit code as the commands of
// engine/commands/commands.h do.
#pragma once
#include "engine/commands/commands.h"

namespace spark {

int run_serve(const Args& args);

}  // namespace spark
