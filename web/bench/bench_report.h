// bench_report.h — how a benchmark run is shown: the progress bar on a terminal, the
// table at the end, and the JSON file with the summary and every request's record.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "web/bench/bench_options.h"
#include "web/bench/bench_stats.h"

namespace spark {

// What the run was, for the report's header and the JSON's "config".
struct BenchRunInfo {
  BenchOptions options;
  std::string model;
  std::string endpoint_path;  // "/v1/completions" or "/v1/chat/completions"
  std::string prompt_source;  // "random" or the dataset path
  std::string length_note;    // how prompt lengths were obtained
  long long prefix_tokens = 0;
  double mean_prompt_tokens = 0;  // as generated (before the server's usage)
  std::string warmup;             // "ok (0.21 s)" or the warm-up's error
  bool interrupted = false;
};

// Prints the summary table (latencies in milliseconds) to `out`.
void print_report(std::FILE* out, const BenchRunInfo& info, const Summary& summary);

// {"config": ..., "summary": ..., "requests": [...]}; times in the JSON are milliseconds
// (fields named *_ms) except the run's duration_s.
nlohmann::json report_json(const BenchRunInfo& info, const Summary& summary, const std::vector<RequestRecord>& records);

// A one-line bar redrawn in place on stderr; draws nothing unless stderr is a terminal.
class ProgressBar {
 public:
  explicit ProgressBar(size_t total);
  void update(size_t done, size_t failed, double elapsed_s);
  void finish();  // ends the line so the report starts on a fresh one

 private:
  size_t total_;
  bool enabled_;
  bool drawn_ = false;
};

}  // namespace spark
