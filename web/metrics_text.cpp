// metrics_text.cpp — Prometheus text format 0.0.4 writer for the engine's snapshot.
#include "web/metrics_text.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace spark {
namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// The shortest text that reads back as the same double ("0.005", not "0.0050000000000000001").
std::string number(double v) {
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

class Writer {
 public:
  Writer(const std::string& model, const std::string& replica)
      : label_("model_name=\"" + escape_label(model) + "\"" +
               (replica.empty() ? "" : ",replica=\"" + escape_label(replica) + "\"")) {}

  void gauge(const std::string& name, const std::string& help, double v) {
    head(name, help, "gauge");
    out_ << name << "{" << label_ << "} " << number(v) << "\n";
  }
  // Counters are exposed as name_total under a family called `name`, as Python's
  // prometheus_client (and so vLLM) writes them.
  void counter(const std::string& name, const std::string& help, double v) {
    head(name, help, "counter");
    out_ << name << "_total{" << label_ << "} " << number(v) << "\n";
  }
  void counter_by(const std::string& name, const std::string& help, const std::string& label,
                  const std::vector<std::pair<std::string, double>>& values) {
    head(name, help, "counter");
    for (const auto& [key, v] : values)
      out_ << name << "_total{" << label_ << "," << label << "=\"" << key << "\"} " << number(v) << "\n";
  }
  void histogram(const std::string& name, const std::string& help, const Histogram& h) {
    head(name, help, "histogram");
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      out_ << name << "_bucket{" << label_ << ",le=\"" << number(h.bounds[i]) << "\"} " << cumulative << "\n";
    }
    out_ << name << "_bucket{" << label_ << ",le=\"+Inf\"} " << h.count << "\n";
    out_ << name << "_sum{" << label_ << "} " << number(h.sum) << "\n";
    out_ << name << "_count{" << label_ << "} " << h.count << "\n";
  }
  std::string str() const { return out_.str(); }

 private:
  void head(const std::string& name, const std::string& help, const char* type) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  std::string label_;
  std::ostringstream out_;
};

}  // namespace

std::string metrics_text(const MetricsSnapshot& m, const ServerGauges& server, const std::string& model_name,
                         const std::string& replica) {
  Writer w(model_name, replica);
  const double kv_usage = m.kv_blocks_total > 0 ? double(m.kv_blocks_used) / double(m.kv_blocks_total) : 0.0;
  std::vector<std::pair<std::string, double>> finished;
  for (FinishReason r : {FinishReason::STOP, FinishReason::LENGTH, FinishReason::ABORT, FinishReason::ERROR})
    finished.emplace_back(std::string(finish_reason_name(r)), double(m.finished(r)));

  // vLLM's names, so dashboards built for vLLM work unchanged.
  w.gauge("vllm:num_requests_running", "Requests in the running batch.", double(m.num_running));
  w.gauge("vllm:num_requests_waiting", "Requests waiting for a slot.", double(m.num_waiting));
  w.gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks referenced by requests (0-1).", kv_usage);
  w.counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", double(m.prefix_cache_queries));
  w.counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", double(m.prefix_cache_hits));
  w.counter("vllm:prompt_tokens", "Prompt tokens of admitted requests.", double(m.prompt_tokens));
  w.counter("vllm:generation_tokens", "Generated tokens.", double(m.generation_tokens));
  w.counter("vllm:num_preemptions", "Sequences preempted to free KV blocks.", double(m.preemptions));
  w.counter_by("vllm:request_success", "Finished requests by finish reason.", "finished_reason", finished);
  w.counter("vllm:spec_decode_num_drafts", "Speculative draft runs verified.", double(m.spec_num_drafts));
  w.counter("vllm:spec_decode_num_draft_tokens", "Speculative draft tokens verified.", double(m.spec_num_draft_tokens));
  w.counter("vllm:spec_decode_num_accepted_tokens", "Speculative draft tokens accepted.",
            double(m.spec_num_accepted_tokens));
  std::vector<std::pair<std::string, double>> per_pos;
  for (size_t i = 0; i < m.spec_accepted_per_pos.size(); ++i)
    per_pos.emplace_back(std::to_string(i), double(m.spec_accepted_per_pos[i]));
  w.counter_by("vllm:spec_decode_num_accepted_tokens_per_pos", "Speculative draft tokens accepted, by draft position.",
               "position", per_pos);
  w.histogram("vllm:time_to_first_token_seconds", "Time to first token.", m.time_to_first_token);
  w.histogram("vllm:time_per_output_token_seconds", "Time per output token after the first.", m.time_per_output_token);
  w.histogram("vllm:e2e_request_latency_seconds", "Request latency from arrival to the last token.", m.e2e_latency);
  w.histogram("vllm:request_queue_time_seconds", "Time requests waited before their first step.", m.queue_time);

  // sparkd's own names.
  w.gauge("sparkd_requests_running", "Sequences in the running batch.", double(m.num_running));
  w.gauge("sparkd_requests_waiting", "Sequences waiting for a slot.", double(m.num_waiting));
  w.gauge("sparkd_kv_blocks_used", "KV-cache blocks referenced by sequences.", double(m.kv_blocks_used));
  w.gauge("sparkd_kv_blocks_total", "KV-cache blocks in the cache.", double(m.kv_blocks_total));
  w.gauge("sparkd_kv_cache_usage_ratio", "kv_blocks_used / kv_blocks_total.", kv_usage);
  w.gauge("sparkd_http_requests_in_flight", "API requests being served.", double(server.http_in_flight));
  w.gauge("sparkd_sequences_admitted", "Engine sequences held by API requests (the 429 count).",
          double(server.sequences_admitted));
  w.gauge("sparkd_ready", "1 when the server accepts requests.", server.ready ? 1 : 0);
  w.counter("sparkd_prompt_tokens", "Prompt tokens of admitted requests.", double(m.prompt_tokens));
  w.counter("sparkd_generation_tokens", "Generated tokens.", double(m.generation_tokens));
  w.counter("sparkd_prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", double(m.prefix_cache_queries));
  w.counter("sparkd_prefix_cache_hits", "Prompt tokens found in the prefix cache.", double(m.prefix_cache_hits));
  w.counter("sparkd_preemptions", "Sequences preempted.", double(m.preemptions));
  w.counter("sparkd_engine_steps", "Forward passes run.", double(m.engine_steps));
  w.counter_by("sparkd_requests_finished", "Finished sequences by reason.", "reason", finished);
  w.histogram("sparkd_time_to_first_token_seconds", "Time to first token.", m.time_to_first_token);
  w.histogram("sparkd_time_per_output_token_seconds", "Time per output token.", m.time_per_output_token);
  w.histogram("sparkd_e2e_request_latency_seconds", "Request latency.", m.e2e_latency);
  w.histogram("sparkd_request_queue_time_seconds", "Queue time.", m.queue_time);
  std::vector<std::pair<std::string, double>> constrained, refused;
  for (size_t k = 0; k < kNumConstraintKinds; ++k) {
    const std::string kind = constraint_kind_name(ConstraintKind(k));
    constrained.emplace_back(kind, double(m.constrained_requests[k]));
    refused.emplace_back(kind, double(m.constraints_refused[k]));
  }
  w.counter_by("sparkd_structured_output_requests", "Requests whose output constraint compiled, by kind.", "kind",
               constrained);
  w.counter_by("sparkd_structured_output_refused", "Output constraints refused with a 400, by kind.", "kind", refused);
  w.counter("sparkd_structured_output_cache_hits", "Constraints whose compiled grammar came from the cache.",
            double(m.constraint_cache_hits));
  w.histogram("sparkd_structured_output_mask_seconds", "Time to compute one token mask of a constrained sequence.",
              m.constraint_mask_time);
  w.histogram("sparkd_structured_output_compile_seconds", "Time to compile a constraint that missed the cache.",
              m.constraint_compile_time);
  return w.str();
}

}  // namespace spark
