// bench_options.h — the flags of `sparkd bench`, their defaults and their validation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spark {

enum class BenchEndpoint { COMPLETIONS, CHAT };

struct BenchOptions {
  std::string url;      // the server, e.g. http://127.0.0.1:8000 (a trailing /v1 is allowed)
  std::string model;    // empty: the first id of GET /v1/models
  std::string api_key;  // --api-key, else $OPENAI_API_KEY, else none
  BenchEndpoint endpoint = BenchEndpoint::COMPLETIONS;
  size_t concurrency = 0;      // most requests in flight; 0 = no limit (only with a rate)
  double request_rate = 0;     // requests per second (Poisson); 0 = all released at once
  size_t num_prompts = 0;      // 0: 100 random prompts, or every line of --dataset
  long long input_len = 256;   // tokens of each random prompt after the shared prefix
  long long output_len = 128;  // max_tokens of every request (ignore_eos keeps it exact)
  long long prefix_len = 0;    // tokens shared by every random prompt
  std::string dataset;         // JSONL prompts instead of random text
  uint64_t seed = 0;
  std::string json_path;   // where to write the full results, or ""
  double timeout_s = 600;  // per request, from sending it to the end of its stream
  // Runs the prompts four times, with speculative decoding on, off, off, on (requests
  // opt out with "speculative": false), and reports the two side by side.
  bool compare_speculative = false;
  // 0: greedy. Above 0 every request samples at this temperature with its own seed
  // (--seed + its index), so repeated passes draw the same tokens.
  double temperature = 0;

  bool poisson() const { return request_rate > 0; }
};

// Parses the arguments after `bench`; throws InputError (exit 2) with a message that
// names the flag for anything missing, unknown, malformed or contradictory.
BenchOptions parse_bench_options(const std::vector<std::string>& args);

const char* bench_usage();

}  // namespace spark
