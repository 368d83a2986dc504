// test_dashboard_stats.cpp — the dashboard's request log (ring, change tracking, timings)
// and the stats sampler (rates from counters, one shared event per tick, closing).
#include <doctest/doctest.h>

#include <atomic>

#include "web/dashboard/dashboard_stats.h"
#include "web/request_log.h"

using namespace spark;

namespace {

RequestOutput output(int64_t prompt, int64_t cached, int64_t generated, Clock::time_point queued) {
  RequestOutput o;
  o.num_prompt_tokens = prompt;
  o.num_cached_tokens = cached;
  o.num_output_tokens = generated;
  o.timings.queued = queued;
  o.timings.scheduled = queued + std::chrono::milliseconds(10);
  if (generated > 0) o.timings.first_token = queued + std::chrono::milliseconds(100);
  if (generated > 0) o.timings.last_token = o.timings.first_token + std::chrono::milliseconds(20 * (generated - 1));
  return o;
}

}  // namespace

TEST_CASE("request log: a request's life from start to finish, with its timings") {
  RequestLog log(8);
  log.start("a", 40);
  auto recent = log.recent();
  REQUIRE(recent.size() == 1);
  CHECK(recent[0].status == "queued");
  CHECK(recent[0].prompt_tokens == 40);
  CHECK(recent[0].ttft_s == -1);

  const auto t0 = Clock::now();
  log.progress("a", output(40, 16, 1, t0));
  recent = log.recent();
  CHECK(recent[0].status == "running");
  CHECK(recent[0].cached_tokens == 16);
  CHECK(recent[0].ttft_s == doctest::Approx(0.1));
  CHECK(recent[0].tpot_s == -1);  // one token: no inter-token time yet

  RequestOutput fin = output(40, 16, 11, t0);
  fin.finished = true;
  fin.finish_reason = FinishReason::LENGTH;
  fin.timings.finished = fin.timings.last_token;
  log.finish("a", fin);
  recent = log.recent();
  CHECK(recent[0].status == "finished");
  CHECK(recent[0].finish_reason == "length");
  CHECK(recent[0].generated_tokens == 11);
  CHECK(recent[0].tpot_s == doctest::Approx(0.02));
  CHECK(recent[0].e2e_s == doctest::Approx(0.3));
  auto lat = log.latencies_since(Clock::now() - std::chrono::seconds(5));
  REQUIRE(lat.size() == 1);
  CHECK(lat[0].ttft_s == doctest::Approx(0.1));

  // a finished record is not reopened by a late fail()
  log.fail("a", "abort", "the client disconnected");
  CHECK(log.recent()[0].finish_reason == "length");
}

TEST_CASE("request log: engine errors and early ends are kept with their reason") {
  RequestLog log(8);
  log.start("e", 5);
  RequestOutput fin = output(5, 0, 0, Clock::now());
  fin.finished = true;
  fin.finish_reason = FinishReason::ERROR;
  fin.error = "backend failed";
  log.finish("e", fin);
  log.start("x", 7);
  log.fail("x", "abort", "the client disconnected");
  auto recent = log.recent();
  REQUIRE(recent.size() == 2);
  CHECK(recent[0].id == "x");
  CHECK(recent[0].finish_reason == "abort");
  CHECK(recent[0].status == "finished");
  CHECK(recent[0].error == "the client disconnected");
  CHECK(recent[0].e2e_s >= 0);
  CHECK(recent[1].status == "failed");
  CHECK(recent[1].error == "backend failed");
  CHECK(log.latencies_since(Clock::now() - std::chrono::seconds(5)).empty());  // no first token
}

TEST_CASE("request log: the ring keeps the newest records and reports changes in order") {
  RequestLog log(3);
  for (int i = 0; i < 5; ++i) log.start("r" + std::to_string(i), i);
  auto recent = log.recent();
  REQUIRE(recent.size() == 3);
  CHECK(recent[0].id == "r4");
  CHECK(recent[2].id == "r2");
  log.progress("r1", output(1, 0, 1, Clock::now()));  // evicted: ignored

  uint64_t v = 0;
  auto all = log.changed_since(0, &v);
  CHECK(all.size() == 3);
  CHECK(v == 5);
  log.progress("r2", output(2, 0, 1, Clock::now()));
  uint64_t v2 = 0;
  auto changed = log.changed_since(v, &v2);
  REQUIRE(changed.size() == 1);
  CHECK(changed[0].id == "r2");
  CHECK(v2 == 6);
  CHECK(log.changed_since(v2, nullptr).empty());
}

TEST_CASE("stats sampler: rates from counter deltas, one shared event per tick, ends when closing") {
  std::atomic<uint64_t> generated{0};
  std::atomic<bool> closing{false};
  RequestLog log;
  StatsSources src;
  src.metrics = [&]() -> std::optional<MetricsSnapshot> {
    MetricsSnapshot m;
    m.generation_tokens = generated.load();
    m.prefix_cache_queries = generated.load() * 2;
    m.prefix_cache_hits = generated.load();
    m.kv_blocks_total = 100;
    m.kv_blocks_used = 25;
    return m;
  };
  src.memory = [] { return MemoryFigures{1000, 2000, 300}; };
  src.host_memory = []() -> std::optional<HostMemory> { return HostMemory{8192, 4096, "test"}; };
  src.closing = [&] { return closing.load(); };
  src.requests = &log;
  StatsSampler sampler(src);

  auto first = sampler.wait_next(0, std::chrono::milliseconds(3000));
  REQUIRE(first);
  generated = 500;
  auto second = sampler.wait_next(first->seq, std::chrono::milliseconds(3000));
  REQUIRE(second);
  CHECK(second->seq == first->seq + 1);
  auto ev = nlohmann::json::parse(second->event->substr(second->event->find('{')));
  const auto& p = ev["point"];
  CHECK(p["generation_tps"].get<double>() > 250);  // 500 tokens over about one second
  CHECK(p["generation_tps"].get<double>() < 1000);
  CHECK(p["prefix_hit_rate"].get<double>() == doctest::Approx(0.5));
  CHECK(p["kv_blocks_used"] == 25);
  CHECK(p["mem_kv"] == 2000);
  CHECK(p["mem_state"] == 300);
  CHECK(p["mem_free"] == 4096);
  CHECK(p["mem_other"] == 8192 - 3300 - 4096);
  CHECK(ev["totals"]["generation_tokens"] == 500);
  // the same event object is handed to every subscriber
  auto again = sampler.wait_next(first->seq, std::chrono::milliseconds(10));
  REQUIRE(again);
  CHECK(again->event.get() == second->event.get());

  auto hist = sampler.history();
  CHECK(hist["t"].size() == 2);
  CHECK(hist["seq"] == second->seq);

  closing = true;
  const auto t0 = Clock::now();
  CHECK_FALSE(sampler.wait_next(second->seq, std::chrono::milliseconds(3000)));
  CHECK(Clock::now() - t0 < std::chrono::milliseconds(1000));  // woken by closing, not the timeout
  CHECK(sampler.closed());
}

TEST_CASE("the memory chart stacks to the box's total, even when reserved KV is not yet resident") {
  // 24 GiB box, 92 MiB weights, 19.1 GiB KV reserved, 22.9 GiB MemAvailable (the KV pages
  // untouched): the free part is what is left of the total, and nothing is other.
  const uint64_t GiB = 1ull << 30, MiB = 1ull << 20;
  StatsPoint p;
  p.mem_weights = 92 * MiB;
  p.mem_kv = uint64_t(19.1 * double(GiB));
  split_host_memory(p, HostMemory{24 * GiB, uint64_t(22.9 * double(GiB)), "test"});
  CHECK(p.mem_weights + p.mem_kv + p.mem_state + *p.mem_free + *p.mem_other == 24 * GiB);
  CHECK(*p.mem_other == 0);
  // Resident KV leaves MemAvailable below what is left: the difference is the OS's and others'.
  split_host_memory(p, HostMemory{24 * GiB, 2 * GiB, "test"});
  CHECK(*p.mem_free == 2 * GiB);
  CHECK(p.mem_weights + p.mem_kv + *p.mem_free + *p.mem_other == 24 * GiB);
  // Plans larger than the box (not possible when planned, but never negative).
  p.mem_kv = 30 * GiB;
  split_host_memory(p, HostMemory{24 * GiB, 2 * GiB, "test"});
  CHECK(*p.mem_free == 0);
  CHECK(*p.mem_other == 0);
}

TEST_CASE("stats totals: the structured-outputs panel's figures from the metrics") {
  Metrics metrics;
  nlohmann::json none = structured_output_json(metrics.snapshot());
  CHECK(none["requests"] == 0);
  CHECK(none["by_kind"].empty());
  CHECK(none["mask_mean_s"].is_null());
  CHECK(none["compile_p50_s"].is_null());

  metrics.constraint_compiled(ConstraintKind::REGEX, 0.003, false);
  metrics.constraint_compiled(ConstraintKind::REGEX, 0.0, true);
  metrics.constraint_compiled(ConstraintKind::CHOICE, 0.0002, false);
  metrics.constraint_refused(ConstraintKind::JSON_SCHEMA, 0.004);
  std::vector<double> masks(99, 2e-5);
  masks.push_back(0.03);
  metrics.observe_mask_times(masks);
  nlohmann::json so = structured_output_json(metrics.snapshot());
  CHECK(so["requests"] == 3);
  CHECK(so["by_kind"] == nlohmann::json{{"regex", 2}, {"choice", 1}});
  CHECK(so["refused"] == 1);
  CHECK(so["cache_hits"] == 1);
  CHECK(so["masks"] == 100);
  CHECK(so["mask_mean_s"].get<double>() == doctest::Approx((99 * 2e-5 + 0.03) / 100));
  const double p99 = so["mask_p99_s"].get<double>();  // the 99th of 100 sits in (1e-5, 2.5e-5]
  CHECK(p99 > 1e-5);
  CHECK(p99 <= 2.5e-5);
  CHECK(so["compiles"] == 3);  // the refusal's time counts, the cache hit's does not
  const double p50 = so["compile_p50_s"].get<double>();
  CHECK(p50 > 0.0025);
  CHECK(p50 <= 0.005);
}
