// respond.cpp — a turn's stream or whole answer on the wire.
#include "web/respond.h"

#include <optional>
#include <utility>

#include "web/server.h"
#include "web/sse.h"

namespace spark {
namespace {

class TurnStream : public SseProducer {
 public:
  explicit TurnStream(std::shared_ptr<Turn> turn) : turn_(std::move(turn)) {}
  bool produce(std::string& out) override {
    if (done_) return false;
    out += turn_->take_opening();
    std::optional<HttpError> failure;
    if (turn_->step(&out, failure)) return true;
    done_ = true;
    // A client that hung up reads nothing more; any other failure ends the stream with
    // the API's error event.
    if (failure && failure->status != 499) turn_->fail(*failure, out);
    return false;
  }
  void abandon() override { turn_->cancel(); }

 private:
  std::shared_ptr<Turn> turn_;
  bool done_ = false;
};

}  // namespace

void respond(std::shared_ptr<Turn> turn, const httplib::Request& http, httplib::Response& res,
             std::shared_ptr<void> hold) {
  if (turn->request().stream) {
    start_sse(http, res, std::make_shared<TurnStream>(std::move(turn)), std::move(hold));
    return;
  }
  std::optional<HttpError> failure;
  while (turn->step(nullptr, failure)) {
  }
  if (failure) throw *failure;
  send_json(res, 200, dump_json(turn->whole()));
}

}  // namespace spark
