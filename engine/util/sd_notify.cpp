// sd_notify.cpp — a few lines over a Unix datagram socket instead of linking libsystemd.
#include "engine/util/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace spark {

bool sd_notify(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t len = std::strlen(path);
  if (len >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path, len);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  socklen_t addr_len = socklen_t(offsetof(sockaddr_un, sun_path) + len);
  ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr), addr_len);
  ::close(fd);
  return sent == ssize_t(state.size());
}

std::chrono::microseconds sd_watchdog_interval() {
  const char* usec = std::getenv("WATCHDOG_USEC");
  if (!usec) return std::chrono::microseconds(0);
  if (const char* pid = std::getenv("WATCHDOG_PID"); pid && std::atoll(pid) != ::getpid())
    return std::chrono::microseconds(0);
  long long v = std::atoll(usec);
  return std::chrono::microseconds(v > 0 ? v : 0);
}

}  // namespace spark
