// test_web_metrics.cpp — the Prometheus text of /metrics: vLLM and sparkd names, labels,
// cumulative histogram buckets, and the SSE event framing.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "web/metrics_text.h"
#include "web/sse.h"

using namespace spark;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

}  // namespace

TEST_CASE("metrics text: gauges, counters with _total, labelled by model_name") {
  Metrics metrics;
  metrics.set_gauges(3, 2, 25, 100);
  metrics.add_prefix_cache(64, 32);
  metrics.add_prompt_tokens(64);
  metrics.add_generation_tokens(10);
  metrics.request_finished(FinishReason::STOP);
  std::string text = metrics_text(metrics.snapshot(), ServerGauges{1, 5, true}, "my \"model\"", "");
  const std::string label = "{model_name=\"my \\\"model\\\"\"}";
  CHECK(has_line(text, "vllm:num_requests_running" + label + " 3"));
  CHECK(has_line(text, "vllm:num_requests_waiting" + label + " 2"));
  CHECK(has_line(text, "vllm:kv_cache_usage_perc" + label + " 0.25"));
  CHECK(has_line(text, "vllm:prefix_cache_queries_total" + label + " 64"));
  CHECK(has_line(text, "vllm:prefix_cache_hits_total" + label + " 32"));
  CHECK(has_line(text, "vllm:prompt_tokens_total" + label + " 64"));
  CHECK(has_line(text, "vllm:generation_tokens_total" + label + " 10"));
  CHECK(has_line(text, "# TYPE vllm:prefix_cache_queries counter"));
  CHECK(has_line(text, "sparkd_kv_blocks_used" + label + " 25"));
  CHECK(has_line(text, "sparkd_sequences_admitted" + label + " 5"));
}

TEST_CASE("metrics text: histogram buckets are cumulative and end with +Inf = count") {
  Metrics metrics;
  metrics.observe_ttft(0.003);
  metrics.observe_ttft(0.003);
  metrics.observe_ttft(0.3);
  metrics.observe_ttft(1000);
  std::string text = metrics_text(metrics.snapshot(), ServerGauges{}, "m", "");
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.001\"} 0"));
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.005\"} 2"));
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.5\"} 3"));
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"160\"} 3"));
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4"));
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 4"));
  CHECK(has_line(text, "# TYPE vllm:e2e_request_latency_seconds histogram"));
}

TEST_CASE("metrics text: a replica name labels every sample after model_name") {
  Metrics metrics;
  metrics.set_gauges(1, 0, 2, 8);
  metrics.observe_ttft(0.003);
  std::string text = metrics_text(metrics.snapshot(), ServerGauges{}, "m", "spark-2:8000");
  CHECK(has_line(text, "vllm:num_requests_running{model_name=\"m\",replica=\"spark-2:8000\"} 1"));
  CHECK(has_line(text, "sparkd_kv_blocks_total{model_name=\"m\",replica=\"spark-2:8000\"} 8"));
  CHECK(has_line(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",replica=\"spark-2:8000\",le=\"0.005\"} 1"));
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line[0] != '#') CHECK_MESSAGE(line.find(",replica=\"spark-2:8000\"") != std::string::npos, line);
  }
}

namespace {

// The samples of one family as (labels after model_name, value), in the order written.
std::vector<std::pair<std::string, double>> samples(const std::string& text, const std::string& name) {
  std::vector<std::pair<std::string, double>> out;
  const std::string head = name + "{model_name=\"m\"";
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    if (line.rfind(head, 0) != 0) continue;
    const size_t close = line.find("} ");
    out.emplace_back(line.substr(head.size(), close - head.size()), std::stod(line.substr(close + 2)));
  }
  return out;
}

}  // namespace

TEST_CASE("metrics text: structured outputs by kind, refusals, cache hits, mask and compile histograms") {
  Metrics metrics;
  metrics.constraint_compiled(ConstraintKind::JSON_SCHEMA, 0.002, false);
  metrics.constraint_compiled(ConstraintKind::JSON_SCHEMA, 0.00001, true);  // from the cache: no compile
  metrics.constraint_compiled(ConstraintKind::TOOL_CALL, 0.3, false);
  metrics.constraint_compiled(ConstraintKind::TOOL_AUTO, 0.0004, false);
  metrics.constraint_refused(ConstraintKind::REGEX, 20.0);  // past the last bound
  const std::vector<double> masks = {0.5e-6, 3e-6, 3e-6, 4e-5, 0.002, 0.2};
  metrics.observe_mask_times(masks);
  metrics.observe_mask_times({});
  const MetricsSnapshot snap = metrics.snapshot();
  std::string text = metrics_text(snap, ServerGauges{}, "m", "");

  CHECK(has_line(text, "# TYPE sparkd_structured_output_requests counter"));
  CHECK(samples(text, "sparkd_structured_output_requests_total") ==
        std::vector<std::pair<std::string, double>>{{",kind=\"json_schema\"", 2}, {",kind=\"json_object\"", 0},
                                                    {",kind=\"regex\"", 0},       {",kind=\"choice\"", 0},
                                                    {",kind=\"tool_call\"", 1},   {",kind=\"tool_auto\"", 1}});
  CHECK(has_line(text, "sparkd_structured_output_refused_total{model_name=\"m\",kind=\"regex\"} 1"));
  CHECK(has_line(text, "sparkd_structured_output_refused_total{model_name=\"m\",kind=\"json_schema\"} 0"));
  CHECK(has_line(text, "sparkd_structured_output_cache_hits_total{model_name=\"m\"} 1"));

  // Both histograms: buckets ascend in `le` and are cumulative up to +Inf = _count.
  for (const char* name : {"sparkd_structured_output_mask_seconds", "sparkd_structured_output_compile_seconds"}) {
    CAPTURE(name);
    CHECK(has_line(text, std::string("# TYPE ") + name + " histogram"));
    auto buckets = samples(text, std::string(name) + "_bucket");
    REQUIRE(buckets.size() == 17);  // 16 bounds and +Inf
    CHECK(buckets.back().first == ",le=\"+Inf\"");
    for (size_t i = 1; i < buckets.size(); ++i) {
      CHECK(buckets[i].second >= buckets[i - 1].second);
      if (i + 1 < buckets.size())
        CHECK(std::stod(buckets[i].first.substr(5)) > std::stod(buckets[i - 1].first.substr(5)));
    }
    CHECK(buckets.back().second == samples(text, std::string(name) + "_count").at(0).second);
  }
  // The mask buckets span 1 µs to 100 ms; compiles 100 µs to 10 s.
  CHECK(has_line(text, "sparkd_structured_output_mask_seconds_bucket{model_name=\"m\",le=\"1e-06\"} 1"));
  CHECK(has_line(text, "sparkd_structured_output_mask_seconds_bucket{model_name=\"m\",le=\"5e-06\"} 3"));
  CHECK(has_line(text, "sparkd_structured_output_mask_seconds_bucket{model_name=\"m\",le=\"0.1\"} 5"));
  CHECK(has_line(text, "sparkd_structured_output_mask_seconds_count{model_name=\"m\"} 6"));
  CHECK(samples(text, "sparkd_structured_output_mask_seconds_sum").at(0).second == doctest::Approx(0.2020465));
  // A cache hit is not a compile; a refusal took compile time too.
  CHECK(has_line(text, "sparkd_structured_output_compile_seconds_bucket{model_name=\"m\",le=\"0.0005\"} 1"));
  CHECK(has_line(text, "sparkd_structured_output_compile_seconds_bucket{model_name=\"m\",le=\"10\"} 3"));
  CHECK(has_line(text, "sparkd_structured_output_compile_seconds_count{model_name=\"m\"} 4"));
  CHECK(snap.constraint_mask_time.quantile(0.5) > 2.5e-6);
  CHECK(snap.constraint_mask_time.quantile(0.5) <= 5e-6);
}

TEST_CASE("sse: one compact data event per object") {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["b"] = 1;
  j["a"] = "x\ny";
  CHECK(sse_event(j) == "data: {\"b\":1,\"a\":\"x\\ny\"}\n\n");
  CHECK(std::string(kSseDone) == "data: [DONE]\n\n");
}
