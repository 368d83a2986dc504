// dashboard.h — the embedded dashboard's routes: the page and its files, the JSON
// snapshot and the per-second stats stream under /api/.
#pragma once
#include <vector>

#include "web/app.h"
#include "web/server.h"

namespace spark {

// Empty when server.dashboard = false. Starts the stats sampler, owned by app.dashboard.
std::vector<Route> dashboard_routes(App& app);

}  // namespace spark
