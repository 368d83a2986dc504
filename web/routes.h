// routes.h — the one table of every HTTP route sparkd serves.
#pragma once
#include <vector>

#include "web/app.h"
#include "web/server.h"

namespace spark {

std::vector<Route> make_routes(App& app);

}  // namespace spark
