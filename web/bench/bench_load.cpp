// bench_load.cpp — seeded arrivals and the worker pool that releases benchmark requests.
#include "web/bench/bench_load.h"

#include <cmath>
#include <limits>

#include "engine/util/check.h"

namespace spark {

uint64_t BenchRng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double BenchRng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

size_t BenchRng::below(size_t n) {
  SPARK_CHECK(n > 0, "below(0)");
  return size_t(next() % uint64_t(n));  // the modulo bias is < 2^-40 for any word list
}

double BenchRng::exponential(double rate) {
  SPARK_CHECK(rate > 0, "exponential rate must be positive");
  // Inverse CDF; 1 - u lies in (0, 1], so the log is finite.
  return -std::log(1.0 - uniform()) / rate;
}

std::vector<double> poisson_arrivals(size_t n, double rate, uint64_t seed) {
  std::vector<double> out(n, 0.0);
  if (n == 0 || std::isinf(rate)) return out;
  BenchRng rng(seed);
  for (size_t i = 1; i < n; ++i) out[i] = out[i - 1] + rng.exponential(rate);
  return out;
}

LoadRunner::LoadRunner(std::vector<double> release_s, size_t max_workers, Job job)
    : release_s_(std::move(release_s)), max_workers_(max_workers), job_(std::move(job)) {
  SPARK_CHECK(max_workers_ > 0, "a load runner needs at least one worker");
}

LoadRunner::~LoadRunner() {
  stop();
  join();
}

void LoadRunner::start() {
  start_ = std::chrono::steady_clock::now();
  dispatcher_ = std::thread([this] { dispatch(); });
}

void LoadRunner::dispatch() {
  for (size_t i = 0; i < release_s_.size(); ++i) {
    auto at = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(release_s_[i]));
    std::unique_lock lock(mu_);
    if (stop_cv_.wait_until(lock, at, [this] { return stopping_; })) break;
    queue_.push_back(i);
    // Spawn only when the released jobs outnumber the idle workers.
    if (queue_.size() > idle_ && threads_.size() < max_workers_) {
      size_t id = threads_.size();
      running_workers_++;
      threads_.emplace_back([this, id] { work(id); });
    }
    cv_.notify_one();
  }
  std::lock_guard lock(mu_);
  released_all_ = true;
  cv_.notify_all();
  done_cv_.notify_all();
}

void LoadRunner::work(size_t worker) {
  std::unique_lock lock(mu_);
  for (;;) {
    idle_++;
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty() || released_all_; });
    idle_--;
    if (stopping_ || queue_.empty()) break;
    size_t job = queue_.front();
    queue_.pop_front();
    started_++;
    lock.unlock();
    job_(job, worker);
    finished_++;
    lock.lock();
  }
  running_workers_--;
  done_cv_.notify_all();
}

bool LoadRunner::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return done_cv_.wait_for(lock, timeout, [this] { return released_all_ && running_workers_ == 0; });
}

void LoadRunner::stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  stop_cv_.notify_all();
}

void LoadRunner::join() {
  if (dispatcher_.joinable()) dispatcher_.join();
  // The dispatcher has exited, so threads_ no longer grows.
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

size_t LoadRunner::workers() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

}  // namespace spark
