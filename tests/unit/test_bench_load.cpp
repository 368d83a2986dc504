// test_bench_load.cpp — seeded Poisson arrivals (determinism, mean, exponential shape) and
// the load runner (concurrency bound, release times, on-demand workers, stop).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <set>
#include <vector>

#include "web/bench/bench_load.h"

using namespace spark;

TEST_CASE("poisson arrivals: the same seed gives the same times, another seed other times") {
  std::vector<double> a = poisson_arrivals(50, 4.0, 7);
  CHECK(a == poisson_arrivals(50, 4.0, 7));
  CHECK(a != poisson_arrivals(50, 4.0, 8));
  CHECK(a.front() == 0.0);
  CHECK(std::is_sorted(a.begin(), a.end()));
  // Fixed values pin the generator: a change to it changes every benchmark's schedule.
  BenchRng rng(0);
  CHECK(rng.next() == 0xE220A8397B1DCDAFull);  // SplitMix64's published first output for seed 0
}

TEST_CASE("poisson arrivals: gaps have mean 1/rate and an exponential distribution") {
  const double rate = 5.0;
  const size_t n = 20001;
  std::vector<double> t = poisson_arrivals(n, rate, 12345);
  std::vector<double> gaps;
  for (size_t i = 1; i < n; ++i) gaps.push_back(t[i] - t[i - 1]);
  double mean = 0;
  for (double g : gaps) mean += g;
  mean /= double(gaps.size());
  // The standard error of the mean of 20000 exponential gaps is 0.2/sqrt(20000) = 0.0014.
  CHECK(mean == doctest::Approx(1.0 / rate).epsilon(0.03));
  // Kolmogorov-Smirnov distance to the exponential CDF; the 1% critical value for
  // n = 20000 is 1.63/sqrt(n) = 0.0115.
  std::sort(gaps.begin(), gaps.end());
  double d = 0;
  for (size_t i = 0; i < gaps.size(); ++i) {
    double cdf = 1.0 - std::exp(-rate * gaps[i]);
    d = std::max(
        {d, std::abs(cdf - double(i) / double(gaps.size())), std::abs(cdf - double(i + 1) / double(gaps.size()))});
  }
  CHECK(d < 0.0115);
}

TEST_CASE("poisson arrivals: an infinite rate releases everything at once") {
  std::vector<double> t = poisson_arrivals(5, INFINITY, 1);
  CHECK(t == std::vector<double>(5, 0.0));
  CHECK(poisson_arrivals(0, 2.0, 1).empty());
}

namespace {

// Jobs that hold their worker until the test opens the gate, counting how many overlap.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  size_t in_flight = 0, peak = 0, ran = 0;
  bool open = false;
  std::multiset<size_t> jobs;
  std::set<size_t> workers;

  void enter(size_t job, size_t worker) {
    std::unique_lock lock(mu);
    jobs.insert(job);
    workers.insert(worker);
    in_flight++;
    peak = std::max(peak, in_flight);
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    in_flight--;
    ran++;
  }
  void wait_in_flight(size_t n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return in_flight >= n; });
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("load runner: never more than the limit in flight, every job exactly once") {
  Gate gate;
  LoadRunner runner(std::vector<double>(12, 0.0), 3, [&](size_t j, size_t w) { gate.enter(j, w); });
  runner.start();
  gate.wait_in_flight(3);
  CHECK_FALSE(runner.wait_for(std::chrono::milliseconds(0)));
  gate.release();
  CHECK(runner.wait_for(std::chrono::seconds(30)));
  runner.join();
  CHECK(gate.peak == 3);
  CHECK(gate.ran == 12);
  CHECK(gate.jobs == std::multiset<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(*gate.workers.rbegin() < 3);
  CHECK(runner.workers() == 3);
  CHECK(runner.finished() == 12);
}

TEST_CASE("load runner: without a real limit, workers are added as jobs find none idle") {
  Gate gate;
  LoadRunner runner(std::vector<double>(6, 0.0), 6, [&](size_t j, size_t w) { gate.enter(j, w); });
  runner.start();
  gate.wait_in_flight(6);  // would never happen with fewer than six workers
  gate.release();
  CHECK(runner.wait_for(std::chrono::seconds(30)));
  runner.join();
  CHECK(gate.workers.size() == 6);
}

TEST_CASE("load runner: a job never starts before its release time") {
  std::vector<double> release = {0.0, 0.03, 0.06, 0.09};
  std::mutex mu;
  std::vector<double> started(release.size(), -1);
  auto before = std::chrono::steady_clock::now();
  LoadRunner runner(release, 4, [&](size_t j, size_t) {
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
    std::lock_guard lock(mu);
    started[j] = t;
  });
  runner.start();
  CHECK(runner.wait_for(std::chrono::seconds(30)));
  runner.join();
  for (size_t j = 0; j < release.size(); ++j) CHECK(started[j] >= release[j]);
}

TEST_CASE("load runner: stop() releases nothing more and lets running jobs finish") {
  Gate gate;
  LoadRunner runner(std::vector<double>(10, 0.0), 2, [&](size_t j, size_t w) { gate.enter(j, w); });
  runner.start();
  gate.wait_in_flight(2);
  runner.stop();
  gate.release();
  CHECK(runner.wait_for(std::chrono::seconds(30)));
  runner.join();
  CHECK(gate.ran == 2);
  CHECK(runner.started() == 2);
}
