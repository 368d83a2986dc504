// socket.cpp — TCP with poll-sliced waits for the peer link.
#include "engine/peer/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace spark {

namespace {

constexpr int kSliceMs = 100;
constexpr int kSocketBufferBytes = 8 << 20;  // room for a micro-batch's activations in flight

int ms_until(SteadyTime deadline) {
  if (deadline == kNoDeadline) return kSliceMs;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return left <= 0 ? 0 : int(std::min<int64_t>(left, kSliceMs));
}

void tune(int fd) {
  int one = 1, size = kSocketBufferBytes;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

std::string errno_text(int e) { return std::strerror(e); }

// Resolves host:port to addresses; throws PeerLost (an unresolvable peer is a link problem).
struct Resolved {
  addrinfo* list = nullptr;
  ~Resolved() {
    if (list) freeaddrinfo(list);
  }
};
void resolve(const Endpoint& e, bool passive, Resolved& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  std::string port = std::to_string(e.port);
  int rc = getaddrinfo(e.host.empty() ? nullptr : e.host.c_str(), port.c_str(), &hints, &out.list);
  if (rc != 0) throw PeerLost("cannot resolve " + e.str() + ": " + gai_strerror(rc));
}

// Waits until fd is readable/writable; false when the slice ran out. Runs `check` and
// enforces the deadline between slices.
bool wait_ready(const Socket& s, short events, SteadyTime deadline, const WaitCheck& check, const char* what) {
  for (;;) {
    if (check) check();
    int ms = ms_until(deadline);
    if (ms == 0 && deadline != kNoDeadline && std::chrono::steady_clock::now() >= deadline)
      throw PeerLost(std::string("the peer did not ") + what + " in time");
    pollfd p{s.fd(), events, 0};
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) throw PeerLost(std::string("poll failed: ") + errno_text(errno));
  }
}

}  // namespace

Endpoint parse_endpoint(const std::string& text, const std::string& key) {
  auto bad = [&](const std::string& why) {
    return InputError(key + " = \"" + text + "\" is not host:port (" + why + ")");
  };
  Endpoint e;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') throw bad("unclosed [v6] address");
    e.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos) throw bad("no port");
    e.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (e.host.empty()) throw bad("no host");
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) throw bad("bad port");
  e.port = std::stoi(port);
  if (e.port < 1 || e.port > 65535) throw bad("port outside 1..65535");
  return e;
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::string Socket::remote() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (fd_ < 0 || getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  return std::string(host) + ":" + port;
}

Socket listen_on(const Endpoint& at) {
  Resolved r;
  try {
    resolve(at, true, r);
  } catch (const PeerLost& e) {
    throw RuntimeError(std::string("cannot listen on ") + at.str() + ": " + e.what());
  }
  std::string last = "no address";
  for (addrinfo* a = r.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) continue;
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(s.fd(), 16) == 0) {
      fcntl(s.fd(), F_SETFL, fcntl(s.fd(), F_GETFL) | O_NONBLOCK);
      return s;
    }
    last = errno_text(errno);
  }
  throw RuntimeError("cannot listen on " + at.str() + " (peer.head_addr): " + last);
}

Socket accept_next(const Socket& listener, int timeout_ms) {
  pollfd p{listener.fd(), POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return {};
  Socket s(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC));
  if (s.valid()) tune(s.fd());
  return s;
}

Socket connect_to(const Endpoint& to, SteadyTime deadline) {
  Resolved r;
  resolve(to, false, r);
  std::string last = "no address";
  for (addrinfo* a = r.list; a; a = a->ai_next) {
    Socket s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) continue;
    tune(s.fd());
    int rc = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
      last = errno_text(errno);
      continue;
    }
    try {
      if (rc != 0) wait_ready(s, POLLOUT, deadline, {}, "accept the connection");
    } catch (const PeerLost& e) {
      last = e.what();
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) return s;
    last = errno_text(err);
  }
  throw PeerLost("cannot connect to " + to.str() + ": " + last);
}

void send_bytes(const Socket& s, const void* data, size_t n, SteadyTime deadline, const WaitCheck& check) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t sent = ::send(s.fd(), p, n, MSG_NOSIGNAL);
    if (sent > 0) {
      p += sent;
      n -= size_t(sent);
      continue;
    }
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      wait_ready(s, POLLOUT, deadline, check, "take our data");
      continue;
    }
    throw PeerLost("the peer connection broke while sending: " + errno_text(errno));
  }
}

void recv_bytes(const Socket& s, void* data, size_t n, SteadyTime deadline, const WaitCheck& check) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    ssize_t got = ::recv(s.fd(), p, n, 0);
    if (got > 0) {
      p += got;
      n -= size_t(got);
      continue;
    }
    if (got == 0) throw PeerLost("the peer closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      wait_ready(s, POLLIN, deadline, check, "answer");
      continue;
    }
    throw PeerLost("the peer connection broke while receiving: " + errno_text(errno));
  }
}

}  // namespace spark
