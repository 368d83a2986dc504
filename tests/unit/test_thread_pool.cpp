// test_thread_pool.cpp — the parallel-for covers every item exactly once and propagates errors.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "engine/util/thread_pool.h"

using namespace spark;

TEST_CASE("cpu thread pool: parallel_for visits each item exactly once") {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (int64_t n : {0, 1, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad_chunks{0};  // doctest assertions are not thread-safe
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
          if (!(b < e) || e - b > grain) bad_chunks.fetch_add(1);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        int bad = 0;
        for (auto& h : hits) bad += h.load() != 1;
        CHECK(bad == 0);
        CHECK(bad_chunks.load() == 0);
      }
    }
  }
}

TEST_CASE("cpu thread pool: many small back-to-back loops (decode-step pattern)") {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int step = 0; step < 500; ++step)
    pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
  CHECK(sum.load() == 500 * 28);
}

TEST_CASE("cpu thread pool: run_on_all gives each thread its index once") {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> seen(4);
  pool.run_on_all([&](int i) { seen[static_cast<size_t>(i)].fetch_add(1); });
  for (auto& s : seen) CHECK(s.load() == 1);
}

TEST_CASE("cpu thread pool: an exception in a worker reaches the caller") {
  ThreadPool pool(2);
  CHECK_THROWS_AS(pool.parallel_for(100, 1,
                                    [&](int64_t b, int64_t) {
                                      if (b == 57) throw std::runtime_error("boom");
                                    }),
                  std::runtime_error);
  // The pool stays usable afterwards.
  std::atomic<int> count{0};
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e) { count.fetch_add(static_cast<int>(e - b)); });
  CHECK(count.load() == 10);
}
