// nccl_standin.cpp — a test stand-in for libnccl.so.2 (never shipped): the functions
// sparkd loads (engine/peer/nccl_api.cpp) plus group calls, for two ranks in two processes
// joined by one TCP connection. Selected the way the real library is: a directory holding
// it first on LD_LIBRARY_PATH.
//
// The semantics tests rely on, as NCCL's:
// - Point-to-point operations of a communicator run in the order they were issued, and
//   the n-th send meets the peer's n-th receive; sizes must agree (else ncclInvalidUsage).
// - A send completes only once the peer's receive has the bytes (the receiver
//   acknowledges after the copy); a receive completes when its bytes are there.
// - Operations between ncclGroupStart and ncclGroupEnd are issued together (receives
//   posted first), so a rank may send to and receive from its peer in one group.
// - A blocking communicator (no config, or config->blocking = 1) returns from a call when
//   the operation is complete; a non-blocking one returns ncclInProgress and
//   ncclCommGetAsyncError reports ncclInProgress until every issued operation is complete.
//   (On a GPU, completion is the stream's; the CUDA emulator runs stream work when it is
//   issued, so here the operation itself is the stream work. Buffers are "device" memory
//   only in that sense: this library must never be used with a real GPU.)
// - ncclCommAbort never blocks: it wakes every waiting call (they fail), closes the
//   connection, and the peer sees ncclRemoteError. A peer that dies does the same.
// - The unique id carries the listening address of the process that made it; that
//   process accepts, the other connects ($NCCL_STANDIN_HOST, default 127.0.0.1, is the
//   address the id names).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "nccl.h"

namespace {

constexpr uint64_t kIdMagic = 0x6e63636c5f736964ull;  // "nccl_sid"
struct IdFields {
  uint64_t magic;
  uint64_t token;  // names the listener in the process that made the id
  uint32_t addr;   // IPv4, network order
  uint16_t port;   // network order
};
static_assert(sizeof(IdFields) <= sizeof(ncclUniqueId));

bool debug() {
  static const bool on = std::getenv("NCCL_DEBUG") != nullptr;
  return on;
}
void warn(const char* what) {
  if (debug()) std::fprintf(stderr, "NCCL stand-in WARN %s\n", what);
}

// Listeners made by ncclGetUniqueId in this process, by token (a forked child inherits
// the map, but not the role: the process id must match too).
struct Listener {
  int fd;
  pid_t pid;
};
std::mutex g_listeners_mu;
std::map<uint64_t, Listener> g_listeners;

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    default: return 0;
  }
}

enum : uint32_t { kData = 1, kAck = 2 };
struct Header {
  uint32_t kind;
  uint32_t reserved;
  uint64_t bytes;
};

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}
bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

struct Op {
  bool send = false;
  char* buf = nullptr;
  size_t bytes = 0;
};

// One rank's side of the pair. Threads: `connector` (until connected; it starts the
// reader), `executor` (runs issued operations in order), `reader` (takes data into posted
// receives, counts acks).
struct State {
  int rank = 0;
  bool blocking = true;
  int fd = -1;
  std::mutex mu;
  std::condition_variable cv;
  bool connected = false;
  bool aborted = false;
  ncclResult_t error = ncclSuccess;  // sticky, set by the first failure
  std::deque<std::vector<Op>> queue;  // groups of operations, issued and not yet started
  uint64_t issued = 0, completed = 0;  // groups
  std::deque<Op> posted;  // receives the reader may fill, in order
  uint64_t recvs_done = 0, acks = 0;
  std::mutex write_mu;
  std::thread connector, executor, reader;

  // A communicator in error is done for: the connection ends too, so the peer's calls
  // fail rather than wait for answers that will not come.
  void fail(ncclResult_t e, const char* why) {
    std::lock_guard lock(mu);
    if (error == ncclSuccess) {
      error = e;
      warn(why);
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
    }
    cv.notify_all();
  }
  bool broken() const { return aborted || error != ncclSuccess; }
};

struct Comm {
  std::shared_ptr<State> state;
};

thread_local int g_group_depth = 0;
thread_local std::vector<std::pair<std::shared_ptr<State>, Op>> g_group_ops;

void reader_loop(State* s);

void connect_pair(const std::shared_ptr<State>& s, IdFields id) {
  int fd = -1;
  int listener = -1;
  {
    std::lock_guard lock(g_listeners_mu);
    auto it = g_listeners.find(id.token);
    if (it != g_listeners.end() && it->second.pid == getpid()) listener = it->second.fd;
  }
  if (listener >= 0) {
    // The id's maker accepts; a connection must present the token before it counts.
    while (fd < 0) {
      {
        std::lock_guard lock(s->mu);
        if (s->aborted) return;
      }
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      int c = accept(listener, nullptr, nullptr);
      if (c < 0) continue;
      uint64_t token = 0;
      timeval tv{5, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      if (read_all(c, &token, sizeof token) && token == id.token) {
        timeval none{0, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        fd = c;
      } else {
        close(c);
      }
    }
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = id.addr;
    a.sin_port = id.port;
    for (;;) {
      {
        std::lock_guard lock(s->mu);
        if (s->aborted) return;
      }
      int c = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && write_all(c, &id.token, sizeof id.token)) {
        fd = c;
        break;
      }
      close(c);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the maker may not listen yet
    }
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::lock_guard lock(s->mu);
  if (s->aborted) {
    close(fd);
    return;
  }
  s->fd = fd;
  s->connected = true;
  s->reader = std::thread(reader_loop, s.get());
  s->cv.notify_all();
}

void reader_loop(State* s) {
  for (;;) {
    Header h{};
    if (!read_all(s->fd, &h, sizeof h)) return s->fail(ncclRemoteError, "the peer closed the connection");
    if (h.kind == kAck) {
      std::lock_guard lock(s->mu);
      ++s->acks;
      s->cv.notify_all();
      continue;
    }
    if (h.kind != kData) return s->fail(ncclRemoteError, "the peer sent a malformed message");
    Op r;
    {
      // The bytes stay in the socket until a receive is posted for them; meanwhile a peer
      // that goes away is still noticed.
      std::unique_lock lock(s->mu);
      while (!s->cv.wait_for(lock, std::chrono::milliseconds(20), [s] { return s->broken() || !s->posted.empty(); })) {
        pollfd p{s->fd, POLLRDHUP, 0};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
          lock.unlock();
          return s->fail(ncclRemoteError, "the peer closed the connection");
        }
      }
      if (s->broken()) return;
      r = s->posted.front();
    }
    if (r.bytes != h.bytes) return s->fail(ncclInvalidUsage, "a send and its receive disagree on the size");
    if (!read_all(s->fd, r.buf, r.bytes)) return s->fail(ncclRemoteError, "the peer closed the connection");
    // Acknowledged before the receive counts as complete: a process that exits right
    // after its receive still completes the peer's send.
    const Header ack{kAck, 0, h.bytes};
    {
      std::lock_guard w(s->write_mu);
      if (!write_all(s->fd, &ack, sizeof ack)) return s->fail(ncclRemoteError, "the peer closed the connection");
    }
    std::lock_guard lock(s->mu);
    s->posted.pop_front();
    ++s->recvs_done;
    s->cv.notify_all();
  }
}

void executor_loop(State* s) {
  uint64_t sends = 0, recvs = 0;  // issued by this loop so far
  for (;;) {
    std::vector<Op> group;
    {
      std::unique_lock lock(s->mu);
      s->cv.wait(lock, [s] { return s->broken() || (s->connected && !s->queue.empty()); });
      if (s->broken()) return;
      group = std::move(s->queue.front());
      s->queue.pop_front();
      for (const Op& op : group)  // receives first, so a group may send to a peer that sends back
        if (!op.send) {
          s->posted.push_back(op);
          ++recvs;
        }
      s->cv.notify_all();
    }
    for (const Op& op : group) {
      if (!op.send) continue;
      const Header h{kData, 0, op.bytes};
      std::lock_guard w(s->write_mu);
      if (!write_all(s->fd, &h, sizeof h) || !write_all(s->fd, op.buf, op.bytes))
        return s->fail(ncclRemoteError, "the peer closed the connection");
      ++sends;
    }
    std::unique_lock lock(s->mu);
    s->cv.wait(lock, [&] { return s->broken() || (s->acks >= sends && s->recvs_done >= recvs); });
    if (s->broken()) return;
    ++s->completed;
    s->cv.notify_all();
  }
}

// Waits until the communicator is up and `done` holds, or it fails; the result to return.
template <typename Done>
ncclResult_t wait_for(State* s, Done done) {
  std::unique_lock lock(s->mu);
  s->cv.wait(lock, [&] { return s->broken() || (s->connected && done()); });
  if (s->aborted) return ncclInvalidUsage;
  return s->error;
}

ncclResult_t issue(const std::shared_ptr<State>& s, std::vector<Op> group) {
  uint64_t ticket;
  {
    std::lock_guard lock(s->mu);
    if (s->aborted) return ncclInvalidUsage;
    if (s->error != ncclSuccess) return s->error;
    s->queue.push_back(std::move(group));
    ticket = ++s->issued;
    s->cv.notify_all();
  }
  if (!s->blocking) return ncclInProgress;
  return wait_for(s.get(), [&] { return s->completed >= ticket; });
}

ncclResult_t p2p(bool send, const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  const size_t size = type_size(type);
  if (size == 0) return ncclInvalidArgument;
  const std::shared_ptr<State> s = reinterpret_cast<Comm*>(comm)->state;
  if (peer != 1 - s->rank) return ncclInvalidArgument;
  if (count && !buf) return ncclInvalidArgument;
  Op op{send, const_cast<char*>(static_cast<const char*>(buf)), count * size};
  if (g_group_depth > 0) {
    g_group_ops.emplace_back(s, op);
    return ncclSuccess;
  }
  return issue(s, {op});
}

void teardown(Comm* c) {
  State* s = c->state.get();
  {
    std::lock_guard lock(s->mu);
    s->aborted = true;
    if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR);  // wakes the reader and a blocked write
    s->cv.notify_all();
  }
  for (std::thread* t : {&s->connector, &s->executor, &s->reader})
    if (t->joinable()) t->join();
  if (s->fd >= 0) {
    // An abortive close (reset): the peer learns at once, even while our unsent bytes
    // wait for room in its receive window.
    linger now{1, 0};
    setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
    close(s->fd);
  }
  s->fd = -1;
  delete c;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* out) {
  if (!out) return ncclInvalidArgument;
  const char* host = std::getenv("NCCL_STANDIN_HOST");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, host ? host : "127.0.0.1", &a.sin_addr) != 1) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  IdFields id{kIdMagic, std::random_device{}() * 0x100000001ull ^ std::random_device{}(), a.sin_addr.s_addr,
              a.sin_port};
  {
    std::lock_guard lock(g_listeners_mu);
    g_listeners[id.token] = Listener{fd, getpid()};
  }
  std::memset(out, 0, sizeof *out);
  std::memcpy(out->internal, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  if (!comm) return ncclInvalidArgument;
  *comm = nullptr;
  IdFields id;
  std::memcpy(&id, commId.internal, sizeof id);
  if (nranks != 2 || rank < 0 || rank > 1 || id.magic != kIdMagic) return ncclInvalidArgument;
  auto s = std::make_shared<State>();
  s->rank = rank;
  // NCCL's default (the field left undefined) is blocking.
  s->blocking = !config || config->blocking != 0;
  auto* c = new Comm{s};
  s->connector = std::thread(connect_pair, s, id);
  s->executor = std::thread(executor_loop, s.get());
  *comm = reinterpret_cast<ncclComm_t>(c);
  if (!s->blocking) return ncclInProgress;
  std::unique_lock lock(s->mu);
  s->cv.wait(lock, [&] { return s->connected || s->aborted; });
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (!comm || !state) return ncclInvalidArgument;
  State* s = reinterpret_cast<Comm*>(comm)->state.get();
  std::lock_guard lock(s->mu);
  if (s->aborted) *state = ncclInvalidUsage;
  else if (s->error != ncclSuccess) *state = s->error;
  else if (!s->connected || s->completed < s->issued) *state = ncclInProgress;
  else *state = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  Comm* c = reinterpret_cast<Comm*>(comm);
  // Issued operations finish first (or fail with the connection).
  wait_for(c->state.get(), [&] { return c->state->completed >= c->state->issued; });
  teardown(c);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  teardown(reinterpret_cast<Comm*>(comm));
  return ncclSuccess;
}

ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  return p2p(true, buf, count, type, peer, comm);
}

ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, cudaStream_t) {
  return p2p(false, buf, count, type, peer, comm);
}

ncclResult_t ncclGroupStart(void) {
  ++g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (g_group_depth == 0) return ncclInvalidUsage;
  if (--g_group_depth > 0) return ncclSuccess;
  // One group per communicator, each issued as a unit.
  std::vector<std::pair<std::shared_ptr<State>, Op>> ops;
  ops.swap(g_group_ops);
  ncclResult_t result = ncclSuccess;
  while (!ops.empty()) {
    std::shared_ptr<State> s = ops.front().first;
    std::vector<Op> group;
    for (auto it = ops.begin(); it != ops.end();)
      if (it->first == s) {
        group.push_back(it->second);
        it = ops.erase(it);
      } else {
        ++it;
      }
    ncclResult_t r = issue(s, std::move(group));
    if (result == ncclSuccess || result == ncclInProgress) result = r == ncclSuccess ? result : r;
  }
  return result;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage (or the communicator was aborted)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

}  // extern "C"
