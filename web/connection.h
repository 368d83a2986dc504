// connection.h — what the HTTP layer needs beyond cpp-httplib: noticing that a client hung
// up while its request waits or streams, and a worker pool that grows with the number of
// open connections so long streams never starve /health.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "web/client_link.h"

namespace spark {

// Watches the socket a request arrived on. cpp-httplib does not hand the socket to
// handlers, so it is found once by its address pair (unique among open connections).
class ConnectionWatch : public ClientLink {
 public:
  explicit ConnectionWatch(const httplib::Request& req);
  // True once the client closed its side (or the socket failed). Cheap: one poll().
  bool closed() const override;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A task queue that starts a worker whenever every worker is busy, up to `max_threads`;
// idle workers stay for reuse. Each keep-alive connection holds a worker while open, so a
// fixed pool could be exhausted by streams or idle clients.
class GrowingTaskQueue : public httplib::TaskQueue {
 public:
  explicit GrowingTaskQueue(size_t max_threads) : max_threads_(max_threads) {}
  ~GrowingTaskQueue() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  void work();
  size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

// Raises the soft open-file limit to the hard one: every connection is a descriptor.
void raise_open_file_limit();

}  // namespace spark
