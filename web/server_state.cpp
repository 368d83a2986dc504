// server_state.cpp — status transitions and in-flight accounting.
#include "web/server_state.h"

namespace spark {

std::string ServerState::reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

void ServerState::set(ServeStatus s, std::string reason) {
  std::lock_guard lock(mu_);
  // DEAD is final: nothing may revive a process whose engine died.
  if (status_ == ServeStatus::DEAD) return;
  status_ = s;
  reason_ = std::move(reason);
}

std::shared_ptr<void> ServerState::track_request() {
  in_flight_.fetch_add(1);
  return std::shared_ptr<void>(nullptr, [this](void*) {
    if (in_flight_.fetch_sub(1) == 1) {
      std::lock_guard lock(mu_);
      idle_cv_.notify_all();
    }
  });
}

bool ServerState::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return idle_cv_.wait_until(lock, deadline, [this] { return in_flight_.load() == 0; });
}

std::string ServerState::problem() const {
  switch (status_.load()) {
    case ServeStatus::LOADING:
    case ServeStatus::DRAINING:
    case ServeStatus::DEAD:
      return reason();
    case ServeStatus::READY:
      break;
  }
  return liveness_ ? liveness_() : "";
}

}  // namespace spark
