// dashboard.h — the embedded dashboard's routes: the page and its files, the JSON
// snapshot and the per-second stats stream under /api/.
#pragma once
#include <vector>

#include "web/app.h"
#include "web/server.h"

namespace spark {

// Empty when server.dashboard = false. Starts the stats sampler, owned by app.dashboard.
// `models`: every served model's App (several models in one sparkd), app's alone when empty:
// the memory chart stacks them all and the page lists each one's weights and KV.
std::vector<Route> dashboard_routes(App& app, std::vector<App*> models = {});

}  // namespace spark
