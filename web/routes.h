// routes.h — the one table of every HTTP route sparkd serves.
#pragma once
#include <vector>

#include "web/model_router.h"
#include "web/server.h"

namespace spark {

// Model-wide routes (health, version, models, metrics) see every model; the others run
// with the App the router picks for each request.
std::vector<Route> make_routes(ModelRouter& router);

}  // namespace spark
