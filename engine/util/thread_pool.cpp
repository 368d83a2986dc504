// thread_pool.cpp — worker threads, spin-then-sleep wakeup and the dynamic parallel-for.
#include "engine/util/thread_pool.h"

#include <sched.h>

#include <chrono>

#include "engine/util/check.h"

namespace spark {

namespace {

// How long an idle worker spins before sleeping. Long enough to bridge the gap between
// two matmuls of one forward pass, short enough not to burn a core between requests.
constexpr auto kSpinTime = std::chrono::microseconds(200);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

ThreadPool::ThreadPool(int num_threads) {
  num_threads_ = num_threads > 0 ? num_threads : available_cores();
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_job(int index) {
  try {
    if (job_.each_fn) {
      (*job_.each_fn)(index);
      return;
    }
    const int64_t chunks = (job_.n + job_.grain - 1) / job_.grain;
    for (;;) {
      int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
      if (c >= chunks) break;
      int64_t begin = c * job_.grain;
      int64_t end = begin + job_.grain < job_.n ? begin + job_.grain : job_.n;
      (*job_.range_fn)(begin, end);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen) {
      auto deadline = std::chrono::steady_clock::now() + kSpinTime;
      int spins = 0;
      while ((gen = generation_.load(std::memory_order_acquire)) == seen) {
        cpu_relax();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() > deadline) break;
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        sleepers_.fetch_sub(1);
        gen = generation_.load(std::memory_order_acquire);
      }
    }
    seen = gen;
    if (stop_.load()) return;
    run_job(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::dispatch(const Job& job) {
  job_ = job;
  error_ = nullptr;
  next_chunk_.store(0, std::memory_order_relaxed);
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  if (num_threads_ > 1) {
    {
      // The lock orders the publication against a worker that is about to sleep.
      std::lock_guard<std::mutex> lock(mutex_);
      generation_.fetch_add(1, std::memory_order_acq_rel);
    }
    if (sleepers_.load() > 0) wake_.notify_all();
  }
  run_job(0);
  // On an oversubscribed machine a worker may be descheduled: yield rather than spin hard.
  for (int spins = 0; pending_.load(std::memory_order_acquire) > 0; ++spins) {
    if (spins < 4096) cpu_relax();
    else std::this_thread::yield();
  }
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || n <= grain) {
    for (int64_t b = 0; b < n; b += grain) fn(b, b + grain < n ? b + grain : n);
    return;
  }
  Job job;
  job.range_fn = &fn;
  job.n = n;
  job.grain = grain;
  dispatch(job);
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  Job job;
  job.each_fn = &fn;
  dispatch(job);
}

}  // namespace spark
