// bench_load.h — the load pattern of a benchmark: seeded Poisson arrival times, and a
// runner that releases jobs at those times to a pool of worker threads (bounded by a
// concurrency limit, or growing with demand when there is none).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spark {

// A small deterministic generator (SplitMix64): the same seed gives the same prompts and
// arrival times with every compiler and standard library, unlike std::*_distribution.
class BenchRng {
 public:
  explicit BenchRng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();                 // [0, 1) with 53 random bits
  size_t below(size_t n);           // [0, n); n > 0
  double exponential(double rate);  // mean 1/rate; rate > 0

 private:
  uint64_t state_;
};

// Arrival offsets (seconds from the start) of `n` requests: the first at 0, then gaps
// drawn from an exponential distribution of mean 1/rate (a Poisson process). A rate of
// +infinity (or 0 requests) means every request is released at once.
std::vector<double> poisson_arrivals(size_t n, double rate, uint64_t seed);

// Runs job(i, worker) for i = 0..n-1. Job i is released no earlier than release_s[i]
// after start(); released jobs wait in order for a free worker. At most `max_workers`
// jobs run at the same time; workers are created only when a released job finds no
// idle one, so an unbounded limit costs one thread per request actually in flight.
// `worker` is a stable index below max_workers, so a job can keep per-worker state
// (a keep-alive HTTP connection).
class LoadRunner {
 public:
  using Job = std::function<void(size_t job, size_t worker)>;
  LoadRunner(std::vector<double> release_s, size_t max_workers, Job job);
  ~LoadRunner();  // stop() and join()
  LoadRunner(const LoadRunner&) = delete;
  LoadRunner& operator=(const LoadRunner&) = delete;

  void start();
  // Waits up to `timeout` for every job to finish; true when they all have.
  bool wait_for(std::chrono::milliseconds timeout);
  // No further job is released or started; jobs already running are not interrupted
  // (their owner cancels them its own way). Safe from any thread.
  void stop();
  void join();

  size_t started() const { return started_.load(); }
  size_t finished() const { return finished_.load(); }
  size_t workers() const;

 private:
  void dispatch();
  void work(size_t worker);

  std::vector<double> release_s_;
  size_t max_workers_;
  Job job_;
  std::chrono::steady_clock::time_point start_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // workers wait for jobs
  std::condition_variable done_cv_;  // wait_for waits for the end
  std::condition_variable stop_cv_;  // the dispatcher sleeps until the next release
  std::deque<size_t> queue_;
  size_t idle_ = 0;
  bool released_all_ = false;
  bool stopping_ = false;
  size_t running_workers_ = 0;
  std::vector<std::thread> threads_;
  std::thread dispatcher_;
  std::atomic<size_t> started_{0};
  std::atomic<size_t> finished_{0};
};

}  // namespace spark
