// test_web_metrics.cpp — the Prometheus text of /metrics: vLLM and sparkd names, labels,
// cumulative histogram buckets, and the SSE event framing.
#include <doctest/doctest.h>

#include <string>

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

TEST_CASE("sse: one compact data event per object") {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["b"] = 1;
  j["a"] = "x\ny";
  CHECK(sse_event(j) == "data: {\"b\":1,\"a\":\"x\\ny\"}\n\n");
  CHECK(std::string(kSseDone) == "data: [DONE]\n\n");
}
