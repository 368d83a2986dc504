// server_state.h — what /health reports and what draining waits for: the serving status,
// its reason, and the count of requests in flight.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace spark {

enum class ServeStatus { LOADING, READY, DRAINING, DEAD };

class ServerState {
 public:
  ServeStatus status() const { return status_.load(); }
  std::string reason() const;
  void set(ServeStatus s, std::string reason = "");

  // Held by every request that does work (not /health); draining waits until none remain.
  std::shared_ptr<void> track_request();
  int in_flight() const { return in_flight_.load(); }
  // Waits until no request is in flight or the deadline passes; true if all finished.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);

  // Asked by /health and the systemd watchdog: is the engine loop alive? (set by serve)
  void set_liveness(std::function<std::string()> problem) { liveness_ = std::move(problem); }
  // "" when healthy, else why not.
  std::string problem() const;

  std::chrono::steady_clock::time_point started() const { return started_; }

 private:
  std::atomic<ServeStatus> status_{ServeStatus::LOADING};
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::string reason_ = "loading the model";
  std::atomic<int> in_flight_{0};
  std::function<std::string()> liveness_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace spark
