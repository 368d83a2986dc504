// bench_report.cpp — the benchmark's table, JSON and progress bar.
#include "web/bench/bench_report.h"

#include <unistd.h>

#include <cmath>
#include <string>

namespace spark {
namespace {

std::string load_description(const BenchOptions& o) {
  char buf[160];
  if (o.poisson() && o.concurrency > 0)
    std::snprintf(buf, sizeof buf, "Poisson arrivals at %.3g req/s, at most %zu in flight", o.request_rate,
                  o.concurrency);
  else if (o.poisson())
    std::snprintf(buf, sizeof buf, "Poisson arrivals at %.3g req/s, no concurrency limit", o.request_rate);
  else
    std::snprintf(buf, sizeof buf, "concurrency %zu (back to back)", o.concurrency);
  return buf;
}

std::string error_list(const Summary& s) {
  std::string out;
  for (int k = 1; k < kErrorKindCount; ++k) {
    if (s.errors[size_t(k)] == 0) continue;
    if (!out.empty()) out += ", ";
    out += std::string(error_kind_name(ErrorKind(k))) + " " + std::to_string(s.errors[size_t(k)]);
  }
  return out.empty() ? "none" : out;
}

void row(std::FILE* out, const char* name, const Distribution& d) {
  if (d.count == 0) {
    std::fprintf(out, "  %-6s %10s %10s %10s %10s %8s\n", name, "-", "-", "-", "-", "0");
    return;
  }
  std::fprintf(out, "  %-6s %10.2f %10.2f %10.2f %10.2f %8zu\n", name, d.mean * 1e3, d.p50 * 1e3, d.p90 * 1e3,
               d.p99 * 1e3, d.count);
}

nlohmann::json dist_json(const Distribution& d) {
  return {{"count", d.count},   {"mean", d.mean * 1e3}, {"p50", d.p50 * 1e3}, {"p90", d.p90 * 1e3},
          {"p99", d.p99 * 1e3}, {"min", d.min * 1e3},   {"max", d.max * 1e3}};
}

double ms(double s) { return s * 1e3; }

}  // namespace

void print_report(std::FILE* out, const BenchRunInfo& info, const Summary& s) {
  const BenchOptions& o = info.options;
  std::fprintf(out, "\n== sparkd bench: %s%s ==\n", o.url.c_str(), info.interrupted ? " (interrupted)" : "");
  std::fprintf(out, "  %-26s %s\n", "model", info.model.c_str());
  std::fprintf(out, "  %-26s %s\n", "endpoint", info.endpoint_path.c_str());
  std::fprintf(out, "  %-26s %s\n", "load", load_description(o).c_str());
  if (info.prompt_source == "random")
    std::fprintf(out, "  %-26s random, %lld input tokens%s, max %lld output tokens, seed %llu\n", "prompts",
                 (long long)(o.prefix_len + o.input_len),
                 o.prefix_len > 0 ? (" (" + std::to_string(info.prefix_tokens) + " shared prefix)").c_str() : "",
                 (long long)o.output_len, (unsigned long long)o.seed);
  else
    std::fprintf(out, "  %-26s %s, max %lld output tokens unless a line sets its own\n", "prompts",
                 info.prompt_source.c_str(), (long long)o.output_len);
  std::fprintf(out, "  %-26s %s\n", "prompt lengths", info.length_note.c_str());
  std::fprintf(out, "  %-26s %s\n", "warm-up", info.warmup.c_str());
  std::fprintf(out, "  %-26s %zu succeeded, %zu failed, %zu cancelled, %zu not sent (of %zu)\n", "requests",
               s.succeeded, s.failed, s.cancelled, s.not_sent, s.planned);
  std::fprintf(out, "  %-26s %s\n", "errors", error_list(s).c_str());
  std::fprintf(out, "  %-26s %.3f s\n", "duration", s.duration_s);
  std::fprintf(out, "  %-26s %lld\n", "input tokens", s.input_tokens);
  std::fprintf(out, "  %-26s %lld (%zu of %zu requests from usage, others counted)\n", "output tokens", s.output_tokens,
               s.output_from_usage, s.succeeded);
  if (s.cached_reported > 0)
    std::fprintf(out, "  %-26s %lld (%.1f%% of input, reported by %zu requests)\n", "cached prompt tokens",
                 s.cached_tokens, s.input_tokens > 0 ? 100.0 * double(s.cached_tokens) / double(s.input_tokens) : 0.0,
                 s.cached_reported);
  else
    std::fprintf(out, "  %-26s not reported by the server\n", "cached prompt tokens");
  std::fprintf(out, "  %-26s %.3f req/s\n", "request throughput", s.request_throughput);
  std::fprintf(out, "  %-26s %.2f tok/s\n", "output token throughput", s.output_throughput);
  std::fprintf(out, "  %-26s %.2f tok/s\n", "total token throughput", s.total_token_throughput);
  std::fprintf(out, "  %-26s %zu\n", "peak requests in flight", s.max_concurrency_seen);
  std::fprintf(out, "\n  %-6s %10s %10s %10s %10s %8s\n", "(ms)", "mean", "p50", "p90", "p99", "n");
  row(out, "TTFT", s.ttft);
  row(out, "TPOT", s.tpot);
  row(out, "ITL", s.itl);
  row(out, "E2E", s.e2e);
  std::fflush(out);
}

nlohmann::json report_json(const BenchRunInfo& info, const Summary& s, const std::vector<RequestRecord>& records) {
  const BenchOptions& o = info.options;
  nlohmann::json config = {
      {"url", o.url},
      {"model", info.model},
      {"endpoint", info.endpoint_path},
      {"concurrency", o.concurrency > 0 ? nlohmann::json(o.concurrency) : nlohmann::json(nullptr)},
      {"request_rate", o.poisson() ? nlohmann::json(o.request_rate) : nlohmann::json(nullptr)},
      {"num_prompts", s.planned},
      {"prompt_source", info.prompt_source},
      {"input_len", info.prompt_source == "random" ? nlohmann::json(o.input_len) : nlohmann::json(nullptr)},
      {"prefix_len", o.prefix_len},
      {"prefix_tokens", info.prefix_tokens},
      {"output_len", o.output_len},
      {"seed", o.seed},
      {"timeout_s", o.timeout_s},
      {"prompt_lengths", info.length_note},
      {"mean_prompt_tokens", info.mean_prompt_tokens},
      {"warmup", info.warmup}};
  nlohmann::json errors = nlohmann::json::object();
  for (int k = 1; k < kErrorKindCount; ++k) errors[error_kind_name(ErrorKind(k))] = s.errors[size_t(k)];
  nlohmann::json summary = {
      {"interrupted", info.interrupted},
      {"planned", s.planned},
      {"succeeded", s.succeeded},
      {"failed", s.failed},
      {"cancelled", s.cancelled},
      {"not_sent", s.not_sent},
      {"errors", errors},
      {"duration_s", s.duration_s},
      {"input_tokens", s.input_tokens},
      {"output_tokens", s.output_tokens},
      {"output_tokens_from_usage", s.output_from_usage},
      {"cached_tokens", s.cached_reported > 0 ? nlohmann::json(s.cached_tokens) : nlohmann::json(nullptr)},
      {"request_throughput", s.request_throughput},
      {"output_throughput", s.output_throughput},
      {"total_token_throughput", s.total_token_throughput},
      {"peak_concurrency", s.max_concurrency_seen},
      {"ttft_ms", dist_json(s.ttft)},
      {"tpot_ms", dist_json(s.tpot)},
      {"itl_ms", dist_json(s.itl)},
      {"e2e_ms", dist_json(s.e2e)}};
  nlohmann::json requests = nlohmann::json::array();
  for (const RequestRecord& r : records) {
    nlohmann::json itl = nlohmann::json::array();
    for (double x : r.itl_s) itl.push_back(ms(x));
    auto tpot = r.tpot_s();
    requests.push_back(
        {{"prompt_index", r.prompt_index},
         {"start_ms", ms(r.start_s)},
         {"success", r.success},
         {"error_kind", r.success ? nlohmann::json(nullptr) : nlohmann::json(error_kind_name(r.error_kind))},
         {"error", r.success ? nlohmann::json(nullptr) : nlohmann::json(r.error)},
         {"http_status", r.http_status},
         {"ttft_ms", r.ttft_s ? nlohmann::json(ms(*r.ttft_s)) : nlohmann::json(nullptr)},
         {"tpot_ms", tpot ? nlohmann::json(ms(*tpot)) : nlohmann::json(nullptr)},
         {"e2e_ms", ms(r.e2e_s)},
         {"itl_ms", itl},
         {"output_tokens", r.output_tokens},
         {"output_tokens_from_usage", r.output_tokens_from_usage},
         {"prompt_tokens", r.prompt_tokens},
         {"prompt_tokens_from_usage", r.prompt_tokens_from_usage},
         {"cached_tokens", r.cached_tokens ? nlohmann::json(*r.cached_tokens) : nlohmann::json(nullptr)},
         {"content_chunks", r.content_chunks}});
  }
  return {{"config", config}, {"summary", summary}, {"requests", requests}};
}

ProgressBar::ProgressBar(size_t total) : total_(total), enabled_(isatty(STDERR_FILENO) == 1) {}

void ProgressBar::update(size_t done, size_t failed, double elapsed_s) {
  if (!enabled_ || total_ == 0) return;
  constexpr int kWidth = 30;
  int filled = int(double(kWidth) * double(done) / double(total_));
  std::string bar(size_t(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r  [%s] %zu/%zu requests, %zu failed, %.1f s ", bar.c_str(), done, total_, failed, elapsed_s);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace spark
