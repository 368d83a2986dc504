// bench_speculative.cpp — the on/off comparison's counters and table.
#include "web/bench/bench_speculative.h"

#include <sstream>

namespace spark {

namespace {

// The value of the sample `name` (no labels, or any labels) in a Prometheus text; sums
// the samples of one name (one per model label).
double sample_value(const std::string& text, const std::string& name, bool& found) {
  double total = 0;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    const char next = line.size() > name.size() ? line[name.size()] : '\0';
    if (next != ' ' && next != '{') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    total += std::strtod(line.c_str() + space + 1, nullptr);
    found = true;
  }
  return total;
}

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

}  // namespace

SpecCounters spec_counters(const std::string& text) {
  SpecCounters c;
  c.drafts = sample_value(text, "vllm:spec_decode_num_drafts_total", c.present);
  c.draft_tokens = sample_value(text, "vllm:spec_decode_num_draft_tokens_total", c.present);
  c.accepted_tokens = sample_value(text, "vllm:spec_decode_num_accepted_tokens_total", c.present);
  return c;
}

SpecCounters operator-(const SpecCounters& a, const SpecCounters& b) {
  return {a.drafts - b.drafts, a.draft_tokens - b.draft_tokens, a.accepted_tokens - b.accepted_tokens,
          a.present && b.present};
}

void print_speculative_comparison(std::FILE* out, const BenchRunInfo& info, const Summary& on, const Summary& off,
                                  const SpecCounters& d) {
  std::fprintf(out, "\n== speculative decoding: on vs off (passes on, off, off, on after an unmeasured prefill of every prompt) ==\n");
  std::fprintf(out, "  %-26s %12s %12s %10s\n", "", "on", "off", "on/off");
  auto row = [&](const char* name, double a, double b, const char* unit) {
    std::fprintf(out, "  %-26s %12.2f %12.2f %9.2fx  %s\n", name, a, b, ratio(a, b), unit);
  };
  row("output token throughput", on.output_throughput, off.output_throughput, "tok/s");
  row("request throughput", on.request_throughput, off.request_throughput, "req/s");
  row("mean TPOT", on.tpot.mean * 1e3, off.tpot.mean * 1e3, "ms");
  row("mean TTFT", on.ttft.mean * 1e3, off.ttft.mean * 1e3, "ms");
  row("mean end-to-end", on.e2e.mean * 1e3, off.e2e.mean * 1e3, "ms");
  std::fprintf(out, "  %-26s %12lld %12lld\n", "output tokens", on.output_tokens, off.output_tokens);
  std::fprintf(out, "  %-26s %12zu %12zu\n", "failed requests", on.failed, off.failed);
  if (!d.present) {
    std::fprintf(out, "  %-26s the server reports no vllm:spec_decode_* metrics\n", "drafts");
    return;
  }
  std::fprintf(out, "  %-26s %.0f verification runs, %.0f draft tokens, %.0f accepted\n", "drafts", d.drafts,
               d.draft_tokens, d.accepted_tokens);
  std::fprintf(out, "  %-26s %.3f\n", "acceptance rate", ratio(d.accepted_tokens, d.draft_tokens));
  std::fprintf(out, "  %-26s %.2f tokens per verification step\n", "mean accepted length",
               d.drafts > 0 ? 1.0 + d.accepted_tokens / d.drafts : 0.0);
  if (d.draft_tokens == 0)
    std::fprintf(out, "  (no drafts: speculation is off on %s, or its steps had no rows to spare at this load)\n",
                 info.options.url.c_str());
}

}  // namespace spark
