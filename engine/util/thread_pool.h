// thread_pool.h — a fixed pool of worker threads with a low-overhead parallel-for.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spark {

// Decode steps launch hundreds of small parallel loops per token, so dispatch must cost
// microseconds: workers spin briefly on a generation counter before sleeping, and the
// calling thread takes a share of the work instead of waiting idle.
class ThreadPool {
 public:
  // num_threads counts the calling thread; 0 = every core the process may use.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Calls fn(begin, end) over [0, n) split into chunks of `grain` items (at least 1),
  // handed out dynamically; returns when every item is done. Must not be called from
  // inside fn (no nesting). Exceptions from fn are rethrown on the caller.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Calls fn(thread_index) once on each of size() threads (index 0 is the caller).
  void run_on_all(const std::function<void(int)>& fn);

 private:
  struct Job {
    const std::function<void(int64_t, int64_t)>* range_fn = nullptr;
    const std::function<void(int)>* each_fn = nullptr;
    int64_t n = 0;
    int64_t grain = 1;
  };
  void worker_loop(int index);
  void run_job(int index);
  void dispatch(const Job& job);

  int num_threads_ = 1;
  std::vector<std::thread> workers_;
  Job job_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// The number of cores this process may run on (affinity mask aware).
int available_cores();

}  // namespace spark
