// test_bench_stats.cpp — percentiles (numpy's linear definition, values worked by hand),
// TPOT as vLLM defines it, the summary's totals, throughput and error counts.
#include <doctest/doctest.h>

#include <vector>

#include "web/bench/bench_stats.h"

using namespace spark;

TEST_CASE("percentiles interpolate linearly between closest ranks, as numpy does") {
  std::vector<double> v = {1, 2, 3, 4};
  // rank = p/100 * (n-1): p50 -> 1.5 -> 2.5; p90 -> 2.7 -> 3.7; p99 -> 2.97 -> 3.97.
  CHECK(percentile_sorted(v, 50) == doctest::Approx(2.5));
  CHECK(percentile_sorted(v, 90) == doctest::Approx(3.7));
  CHECK(percentile_sorted(v, 99) == doctest::Approx(3.97));
  CHECK(percentile_sorted(v, 0) == 1);
  CHECK(percentile_sorted(v, 100) == 4);
  CHECK(percentile_sorted({7}, 99) == 7);
  std::vector<double> tens;
  for (int i = 1; i <= 10; ++i) tens.push_back(i * 10);
  // rank 0.9 * 9 = 8.1 -> 90 + 0.1 * 10.
  CHECK(percentile_sorted(tens, 90) == doctest::Approx(91));
}

TEST_CASE("distribution_of sorts its input and reports mean, percentiles and range") {
  Distribution d = distribution_of({4, 1, 3, 2});
  CHECK(d.count == 4);
  CHECK(d.mean == doctest::Approx(2.5));
  CHECK(d.p50 == doctest::Approx(2.5));
  CHECK(d.min == 1);
  CHECK(d.max == 4);
  CHECK(distribution_of({}).count == 0);
}

TEST_CASE("TPOT is (e2e - ttft) / (output tokens - 1), absent below two tokens") {
  RequestRecord r;
  r.ttft_s = 0.2;
  r.e2e_s = 0.2 + 9 * 0.02;
  r.output_tokens = 10;
  CHECK(*r.tpot_s() == doctest::Approx(0.02));
  r.output_tokens = 1;
  CHECK_FALSE(r.tpot_s().has_value());
  r.output_tokens = 10;
  r.ttft_s.reset();
  CHECK_FALSE(r.tpot_s().has_value());
}

namespace {

RequestRecord ok(double start, double ttft, double e2e, long long out, long long in) {
  RequestRecord r;
  r.success = true;
  r.start_s = start;
  r.ttft_s = ttft;
  r.e2e_s = e2e;
  r.output_tokens = out;
  r.output_tokens_from_usage = true;
  r.prompt_tokens = in;
  r.itl_s = std::vector<double>(size_t(out - 1), (e2e - ttft) / double(out - 1));
  return r;
}

RequestRecord failed(ErrorKind kind, double start, double e2e) {
  RequestRecord r;
  r.error_kind = kind;
  r.start_s = start;
  r.e2e_s = e2e;
  r.output_tokens = 99;  // partial output of a failed request is not counted
  return r;
}

}  // namespace

TEST_CASE("summary: totals and throughput from succeeded requests only, errors by kind") {
  std::vector<RequestRecord> records = {ok(0.0, 0.1, 1.1, 11, 100), ok(0.5, 0.3, 2.3, 21, 50),
                                        failed(ErrorKind::HTTP_5XX, 1.0, 0.01), failed(ErrorKind::HTTP_5XX, 1.1, 0.01),
                                        failed(ErrorKind::CANCELLED, 2.0, 0.5)};
  records[1].cached_tokens = 40;
  Summary s = summarize(records, 8, 4.0);
  CHECK(s.planned == 8);
  CHECK(s.succeeded == 2);
  CHECK(s.failed == 2);
  CHECK(s.cancelled == 1);
  CHECK(s.not_sent == 3);
  CHECK(s.errors[size_t(ErrorKind::HTTP_5XX)] == 2);
  CHECK(s.errors[size_t(ErrorKind::CANCELLED)] == 1);
  CHECK(s.errors[size_t(ErrorKind::CONNECT)] == 0);
  CHECK(s.output_tokens == 32);
  CHECK(s.input_tokens == 150);
  CHECK(s.cached_tokens == 40);
  CHECK(s.cached_reported == 1);
  CHECK(s.output_from_usage == 2);
  CHECK(s.request_throughput == doctest::Approx(0.5));
  CHECK(s.output_throughput == doctest::Approx(8.0));
  CHECK(s.total_token_throughput == doctest::Approx(182.0 / 4.0));
  CHECK(s.ttft.count == 2);
  CHECK(s.ttft.mean == doctest::Approx(0.2));
  CHECK(s.tpot.mean == doctest::Approx(0.1));  // both requests: 1.0 s over 10 gaps, 2.0 s over 20
  CHECK(s.itl.count == 30);
  CHECK(s.itl.mean == doctest::Approx(0.1));
  CHECK(s.e2e.max == doctest::Approx(2.3));
}

TEST_CASE("peak concurrency counts overlapping requests; back-to-back ones do not overlap") {
  std::vector<RequestRecord> serial = {ok(0.0, 0.1, 1.0, 2, 1), ok(1.0, 0.1, 1.0, 2, 1), ok(2.0, 0.1, 1.0, 2, 1)};
  CHECK(peak_concurrency(serial) == 1);
  std::vector<RequestRecord> overlap = {ok(0.0, 0.1, 3.0, 2, 1), ok(0.5, 0.1, 1.0, 2, 1), ok(1.0, 0.1, 1.0, 2, 1),
                                        ok(2.5, 0.1, 1.0, 2, 1)};
  CHECK(peak_concurrency(overlap) == 3);
  CHECK(peak_concurrency({}) == 0);
}
