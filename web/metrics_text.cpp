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

// Writes each family once over every model: `value` reads a model's sample(s) from its
// ModelMetrics, so a family's samples follow its one # HELP / # TYPE.
class Writer {
 public:
  Writer(const std::vector<ModelMetrics>& models, const std::string& replica) : models_(models) {
    for (const ModelMetrics& m : models)
      labels_.push_back("model_name=\"" + escape_label(m.model_name) + "\"" +
                        (replica.empty() ? "" : ",replica=\"" + escape_label(replica) + "\""));
  }

  template <typename F>
  void gauge(const std::string& name, const std::string& help, F value) {
    head(name, help, "gauge");
    for (size_t i = 0; i < models_.size(); ++i)
      out_ << name << "{" << labels_[i] << "} " << number(double(value(models_[i]))) << "\n";
  }
  // Counters are exposed as name_total under a family called `name`, as Python's
  // prometheus_client (and so vLLM) writes them.
  template <typename F>
  void counter(const std::string& name, const std::string& help, F value) {
    head(name, help, "counter");
    for (size_t i = 0; i < models_.size(); ++i)
      out_ << name << "_total{" << labels_[i] << "} " << number(double(value(models_[i]))) << "\n";
  }
  // `values` gives a model's (label value, sample) pairs.
  template <typename F>
  void counter_by(const std::string& name, const std::string& help, const std::string& label, F values) {
    head(name, help, "counter");
    for (size_t i = 0; i < models_.size(); ++i)
      for (const auto& [key, v] : values(models_[i]))
        out_ << name << "_total{" << labels_[i] << "," << label << "=\"" << key << "\"} " << number(v) << "\n";
  }
  template <typename F>
  void histogram(const std::string& name, const std::string& help, F histogram_of) {
    head(name, help, "histogram");
    for (size_t i = 0; i < models_.size(); ++i) {
      const Histogram& h = histogram_of(models_[i]);
      const std::string& label = labels_[i];
      uint64_t cumulative = 0;
      for (size_t b = 0; b < h.bounds.size(); ++b) {
        cumulative += h.counts[b];
        out_ << name << "_bucket{" << label << ",le=\"" << number(h.bounds[b]) << "\"} " << cumulative << "\n";
      }
      out_ << name << "_bucket{" << label << ",le=\"+Inf\"} " << h.count << "\n";
      out_ << name << "_sum{" << label << "} " << number(h.sum) << "\n";
      out_ << name << "_count{" << label << "} " << h.count << "\n";
    }
  }
  std::string str() const { return out_.str(); }

 private:
  void head(const std::string& name, const std::string& help, const char* type) {
    out_ << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  }
  const std::vector<ModelMetrics>& models_;
  std::vector<std::string> labels_;
  std::ostringstream out_;
};

using Pairs = std::vector<std::pair<std::string, double>>;

double kv_usage(const MetricsSnapshot& m) {
  return m.kv_blocks_total > 0 ? double(m.kv_blocks_used) / double(m.kv_blocks_total) : 0.0;
}

Pairs finished(const MetricsSnapshot& m) {
  Pairs out;
  for (FinishReason r : {FinishReason::STOP, FinishReason::LENGTH, FinishReason::ABORT, FinishReason::ERROR})
    out.emplace_back(std::string(finish_reason_name(r)), double(m.finished(r)));
  return out;
}

Pairs accepted_per_pos(const MetricsSnapshot& m) {
  Pairs out;
  for (size_t i = 0; i < m.spec_accepted_per_pos.size(); ++i)
    out.emplace_back(std::to_string(i), double(m.spec_accepted_per_pos[i]));
  return out;
}

// Per constraint kind: compiled (refused = false) or refused with a 400.
Pairs constraints(const MetricsSnapshot& m, bool refused) {
  Pairs out;
  for (size_t k = 0; k < kNumConstraintKinds; ++k)
    out.emplace_back(constraint_kind_name(ConstraintKind(k)),
                     double(refused ? m.constraints_refused[k] : m.constrained_requests[k]));
  return out;
}

}  // namespace

std::string metrics_text(const MetricsSnapshot& m, const ServerGauges& server, const std::string& model_name,
                         const std::string& replica) {
  return metrics_text(std::vector<ModelMetrics>{{m, server, model_name}}, replica);
}

std::string metrics_text(const std::vector<ModelMetrics>& models, const std::string& replica) {
  using M = const ModelMetrics&;
  Writer w(models, replica);
  // vLLM's names, so dashboards built for vLLM work unchanged.
  w.gauge("vllm:num_requests_running", "Requests in the running batch.", [](M x) { return x.snapshot.num_running; });
  w.gauge("vllm:num_requests_waiting", "Requests waiting for a slot.", [](M x) { return x.snapshot.num_waiting; });
  w.gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks referenced by requests (0-1).",
          [](M x) { return kv_usage(x.snapshot); });
  w.counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
            [](M x) { return x.snapshot.prefix_cache_queries; });
  w.counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.",
            [](M x) { return x.snapshot.prefix_cache_hits; });
  w.counter("vllm:prompt_tokens", "Prompt tokens of admitted requests.", [](M x) { return x.snapshot.prompt_tokens; });
  w.counter("vllm:generation_tokens", "Generated tokens.", [](M x) { return x.snapshot.generation_tokens; });
  w.counter("vllm:num_preemptions", "Sequences preempted to free KV blocks.", [](M x) { return x.snapshot.preemptions; });
  w.counter_by("vllm:request_success", "Finished requests by finish reason.", "finished_reason",
               [](M x) { return finished(x.snapshot); });
  w.counter("vllm:spec_decode_num_drafts", "Speculative draft runs verified.",
            [](M x) { return x.snapshot.spec_num_drafts; });
  w.counter("vllm:spec_decode_num_draft_tokens", "Speculative draft tokens verified.",
            [](M x) { return x.snapshot.spec_num_draft_tokens; });
  w.counter("vllm:spec_decode_num_accepted_tokens", "Speculative draft tokens accepted.",
            [](M x) { return x.snapshot.spec_num_accepted_tokens; });
  w.counter_by("vllm:spec_decode_num_accepted_tokens_per_pos", "Speculative draft tokens accepted, by draft position.",
               "position", [](M x) { return accepted_per_pos(x.snapshot); });
  w.histogram("vllm:time_to_first_token_seconds", "Time to first token.",
              [](M x) -> const Histogram& { return x.snapshot.time_to_first_token; });
  w.histogram("vllm:time_per_output_token_seconds", "Time per output token after the first.",
              [](M x) -> const Histogram& { return x.snapshot.time_per_output_token; });
  w.histogram("vllm:e2e_request_latency_seconds", "Request latency from arrival to the last token.",
              [](M x) -> const Histogram& { return x.snapshot.e2e_latency; });
  w.histogram("vllm:request_queue_time_seconds", "Time requests waited before their first step.",
              [](M x) -> const Histogram& { return x.snapshot.queue_time; });

  // sparkd's own names.
  w.gauge("sparkd_requests_running", "Sequences in the running batch.", [](M x) { return x.snapshot.num_running; });
  w.gauge("sparkd_requests_waiting", "Sequences waiting for a slot.", [](M x) { return x.snapshot.num_waiting; });
  w.gauge("sparkd_kv_blocks_used", "KV-cache blocks referenced by sequences.",
          [](M x) { return x.snapshot.kv_blocks_used; });
  w.gauge("sparkd_kv_blocks_total", "KV-cache blocks in the cache.", [](M x) { return x.snapshot.kv_blocks_total; });
  w.gauge("sparkd_kv_cache_usage_ratio", "kv_blocks_used / kv_blocks_total.", [](M x) { return kv_usage(x.snapshot); });
  w.gauge("sparkd_http_requests_in_flight", "API requests being served.", [](M x) { return x.server.http_in_flight; });
  w.gauge("sparkd_sequences_admitted", "Engine sequences held by API requests (the 429 count).",
          [](M x) { return x.server.sequences_admitted; });
  w.gauge("sparkd_ready", "1 when the server accepts requests.", [](M x) { return x.server.ready ? 1 : 0; });
  w.counter("sparkd_prompt_tokens", "Prompt tokens of admitted requests.", [](M x) { return x.snapshot.prompt_tokens; });
  w.counter("sparkd_generation_tokens", "Generated tokens.", [](M x) { return x.snapshot.generation_tokens; });
  w.counter("sparkd_prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
            [](M x) { return x.snapshot.prefix_cache_queries; });
  w.counter("sparkd_prefix_cache_hits", "Prompt tokens found in the prefix cache.",
            [](M x) { return x.snapshot.prefix_cache_hits; });
  w.counter("sparkd_preemptions", "Sequences preempted.", [](M x) { return x.snapshot.preemptions; });
  w.counter("sparkd_engine_steps", "Forward passes run.", [](M x) { return x.snapshot.engine_steps; });
  w.counter_by("sparkd_requests_finished", "Finished sequences by reason.", "reason",
               [](M x) { return finished(x.snapshot); });
  w.histogram("sparkd_time_to_first_token_seconds", "Time to first token.",
              [](M x) -> const Histogram& { return x.snapshot.time_to_first_token; });
  w.histogram("sparkd_time_per_output_token_seconds", "Time per output token.",
              [](M x) -> const Histogram& { return x.snapshot.time_per_output_token; });
  w.histogram("sparkd_e2e_request_latency_seconds", "Request latency.",
              [](M x) -> const Histogram& { return x.snapshot.e2e_latency; });
  w.histogram("sparkd_request_queue_time_seconds", "Queue time.",
              [](M x) -> const Histogram& { return x.snapshot.queue_time; });
  w.counter_by("sparkd_structured_output_requests", "Requests whose output constraint compiled, by kind.", "kind",
               [](M x) { return constraints(x.snapshot, false); });
  w.counter_by("sparkd_structured_output_refused", "Output constraints refused with a 400, by kind.", "kind",
               [](M x) { return constraints(x.snapshot, true); });
  w.counter("sparkd_structured_output_cache_hits", "Constraints whose compiled grammar came from the cache.",
            [](M x) { return x.snapshot.constraint_cache_hits; });
  w.histogram("sparkd_structured_output_mask_seconds", "Time to compute one token mask of a constrained sequence.",
              [](M x) -> const Histogram& { return x.snapshot.constraint_mask_time; });
  w.histogram("sparkd_structured_output_compile_seconds", "Time to compile a constraint that missed the cache.",
              [](M x) -> const Histogram& { return x.snapshot.constraint_compile_time; });
  return w.str();
}

}  // namespace spark
