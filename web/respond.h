// respond.h — answers an HTTP request with a turn: an SSE stream when the request asked
// for one, else the whole JSON (or an HttpError for the route's error wrapper).
#pragma once
#include <memory>

#include <httplib.h>

#include "web/turn.h"

namespace spark {

// `hold` keeps a draining server up until the answer is sent.
void respond(std::shared_ptr<Turn> turn, const httplib::Request& http, httplib::Response& res,
             std::shared_ptr<void> hold);

}  // namespace spark
