// bench_stats.cpp — percentiles and the run summary.
#include "web/bench/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "engine/util/check.h"

namespace spark {

std::optional<double> RequestRecord::tpot_s() const {
  if (!ttft_s || output_tokens < 2) return std::nullopt;
  return (e2e_s - *ttft_s) / double(output_tokens - 1);
}

double percentile_sorted(const std::vector<double>& sorted, double p) {
  SPARK_CHECK(!sorted.empty(), "percentile of no values");
  SPARK_CHECK(p >= 0 && p <= 100, "percentile out of range");
  double rank = p / 100.0 * double(sorted.size() - 1);
  size_t lo = size_t(std::floor(rank));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  double frac = rank - double(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

Distribution distribution_of(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = values.size();
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
  d.p50 = percentile_sorted(values, 50);
  d.p90 = percentile_sorted(values, 90);
  d.p99 = percentile_sorted(values, 99);
  d.min = values.front();
  d.max = values.back();
  return d;
}

Summary summarize(const std::vector<RequestRecord>& records, size_t planned, double duration_s) {
  Summary s;
  s.planned = planned;
  s.duration_s = duration_s;
  s.not_sent = planned > records.size() ? planned - records.size() : 0;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      s.errors[size_t(r.error_kind)]++;
      if (r.error_kind == ErrorKind::CANCELLED)
        s.cancelled++;
      else
        s.failed++;
      continue;
    }
    s.succeeded++;
    s.input_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    if (r.output_tokens_from_usage) s.output_from_usage++;
    if (r.cached_tokens) {
      s.cached_tokens += *r.cached_tokens;
      s.cached_reported++;
    }
    if (r.ttft_s) ttft.push_back(*r.ttft_s);
    if (auto t = r.tpot_s()) tpot.push_back(*t);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2e.push_back(r.e2e_s);
  }
  if (duration_s > 0) {
    s.request_throughput = double(s.succeeded) / duration_s;
    s.output_throughput = double(s.output_tokens) / duration_s;
    s.total_token_throughput = double(s.input_tokens + s.output_tokens) / duration_s;
  }
  s.max_concurrency_seen = peak_concurrency(records);
  s.ttft = distribution_of(std::move(ttft));
  s.tpot = distribution_of(std::move(tpot));
  s.itl = distribution_of(std::move(itl));
  s.e2e = distribution_of(std::move(e2e));
  return s;
}

size_t peak_concurrency(const std::vector<RequestRecord>& records) {
  // Sweep over start (+1) and end (-1) events; at equal times ends come first, so a
  // request that starts the instant another ends does not count as overlapping it.
  std::vector<std::pair<double, int>> events;
  events.reserve(records.size() * 2);
  for (const RequestRecord& r : records) {
    events.emplace_back(r.start_s, +1);
    events.emplace_back(r.start_s + r.e2e_s, -1);
  }
  std::sort(events.begin(), events.end());
  long current = 0, peak = 0;
  for (const auto& [t, delta] : events) {
    current += delta;
    peak = std::max(peak, current);
  }
  return size_t(peak);
}

}  // namespace spark
