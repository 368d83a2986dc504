// serve.cpp — `sparkd serve`: load, listen, tell systemd, drain on SIGTERM/SIGINT.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/commands/commands.h"
#include "engine/config.h"
#include "engine/util/check.h"
#include "engine/util/flags.h"
#include "engine/util/log.h"
#include "engine/util/sd_notify.h"
#include "engine/util/version.h"
#include "web/app.h"
#include "web/routes.h"
#include "web/server.h"

namespace spark {
namespace {

// Waits for SIGTERM/SIGINT on a thread of its own (the signals are blocked everywhere
// else): the first starts the drain, a second exits at once.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGTERM);
    sigaddset(&set_, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the process
    thread_ = std::thread([this] { loop(); });
    thread_.detach();
  }
  // Blocks until the first signal; returns its name.
  std::string wait_first() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return got_ != 0; });
    return got_ == SIGTERM ? "SIGTERM" : "SIGINT";
  }

 private:
  void loop() {
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      std::lock_guard lock(mu_);
      if (got_ != 0) {
        log_warn("second signal: exiting now without finishing in-flight requests");
        _exit(1);
      }
      got_ = sig;
      cv_.notify_all();
    }
  }
  sigset_t set_;
  std::mutex mu_;
  std::condition_variable cv_;
  int got_ = 0;
  std::thread thread_;
};

// Sends WATCHDOG=1 at half the interval systemd asked for, but only while the engine is
// healthy: a wedged engine stops the pings and systemd restarts the service.
void start_watchdog(ServerState& state, std::atomic<bool>& stop) {
  auto interval = sd_watchdog_interval();
  if (interval.count() == 0) return;
  std::thread([&state, &stop, interval] {
    while (!stop.load()) {
      if (state.status() != ServeStatus::DEAD && state.problem().empty()) sd_notify("WATCHDOG=1");
      std::this_thread::sleep_for(interval / 2);
    }
  }).detach();
}

}  // namespace

int run_serve(const Args& args) {
  Flags flags(args);
  flags.expect_only({"config", "set"});
  Config config = load_config(flags.require("config"), flags.get_all("set"));
  log_configure(config.log.level, config.log.format);
  log_info("sparkd ", version_string(), " starting with ", config.source);

  SignalWatcher signals;  // before any thread starts, so every thread inherits the mask
  ServerState state;
  HttpServer http(config.server, state);
  App app{config, state, http, config.model.name};
  http.add_routes(make_routes(app));
  int port = http.bind();
  std::thread http_thread([&http] { http.run(); });
  log_info("listening on http://", config.server.host, ":", port);

  state.set(ServeStatus::READY);
  sd_notify("READY=1\nSTATUS=serving on port " + std::to_string(port));
  std::atomic<bool> stop_watchdog{false};
  start_watchdog(state, stop_watchdog);

  std::string sig = signals.wait_first();
  log_info(sig, " received: draining (", state.in_flight(), " requests in flight, up to ",
           config.server.drain_timeout_s, " s)");
  state.set(ServeStatus::DRAINING, "draining: the server is shutting down");
  sd_notify("STOPPING=1\nSTATUS=draining");
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(int64_t(config.server.drain_timeout_s * 1000));
  if (!state.wait_idle(deadline))
    log_warn("drain timeout: ", state.in_flight(), " requests still in flight are cut off");
  stop_watchdog = true;
  http.stop();
  http_thread.join();
  log_info("stopped");
  return 0;
}

}  // namespace spark
