// bench_speculative.h — `sparkd bench --compare-speculative`: the same prompts with
// speculative decoding on and off in one run, side by side, with the drafts' acceptance
// read from the server's /metrics.
#pragma once
#include <cstdio>
#include <string>

#include "web/bench/bench_report.h"
#include "web/bench/bench_stats.h"

namespace spark {

// The vLLM spec-decode counters of a /metrics text (zeros when absent).
struct SpecCounters {
  double drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  bool present = false;
};
SpecCounters spec_counters(const std::string& metrics_text);
SpecCounters operator-(const SpecCounters& a, const SpecCounters& b);

// The two sides of the run (each the sum of its two passes) and the speculative side's
// draft counters: throughput and latencies with their on/off ratios, the acceptance rate
// (accepted / draft tokens) and the mean accepted length (1 + accepted / drafts, tokens
// per verification step, as vLLM reports it).
void print_speculative_comparison(std::FILE* out, const BenchRunInfo& info, const Summary& on, const Summary& off,
                                  const SpecCounters& drafts);

}  // namespace spark
