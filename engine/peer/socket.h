// socket.h — TCP for the peer link: listen, connect and exact-length reads and writes
// that wait in short slices, so a dead or silent peer never blocks a thread for longer
// than its deadline (or than the caller's liveness check allows).
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "engine/util/check.h"

namespace spark {

using SteadyTime = std::chrono::steady_clock::time_point;
inline SteadyTime steady_after(double seconds) {
  return std::chrono::steady_clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}
inline constexpr SteadyTime kNoDeadline = SteadyTime::max();

// Called every wait slice (~100 ms); it throws PeerLost to give up early, e.g. when the
// control channel has declared the peer dead while the data path waits.
using WaitCheck = std::function<void()>;

struct Endpoint {
  std::string host;
  int port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};
// "host:port" or "[v6]:port"; throws InputError naming `key` and the text.
Endpoint parse_endpoint(const std::string& text, const std::string& key);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close();
  // Ends both directions without releasing the descriptor: a thread blocked on it
  // wakes up with an error, and the descriptor cannot be reused under it.
  void shutdown();
  std::string remote() const;  // "10.0.0.2:41234", or "" when unknown

 private:
  int fd_ = -1;
};

// Throws RuntimeError naming the address and the reason (port in use, ...).
Socket listen_on(const Endpoint& at);
// The next connection, or an invalid Socket when none arrives within timeout_ms.
Socket accept_next(const Socket& listener, int timeout_ms);
// Throws PeerLost naming the address and the reason (refused, unreachable, timed out).
Socket connect_to(const Endpoint& to, SteadyTime deadline);

// Exactly n bytes, or PeerLost (closed, reset, deadline passed, or `check` threw).
void send_bytes(const Socket& s, const void* data, size_t n, SteadyTime deadline, const WaitCheck& check = {});
void recv_bytes(const Socket& s, void* data, size_t n, SteadyTime deadline, const WaitCheck& check = {});

}  // namespace spark
