// bench_options.cpp — flag parsing and validation for `sparkd bench`.
#include "web/bench/bench_options.h"

#include <cstdlib>

#include "engine/util/check.h"
#include "engine/util/flags.h"

namespace spark {

const char* bench_usage() {
  return R"(usage: sparkd bench --url URL [options]

Measures an OpenAI-compatible server (sparkd, vLLM, llama.cpp, SGLang, ...) with
streamed requests: TTFT, TPOT, ITL, end-to-end latency, throughput, errors.

  --url URL            server address, e.g. http://127.0.0.1:8000 (or .../v1)
  --model NAME         model id to request (default: the first id of GET /v1/models)
  --api-key KEY        bearer token (default: $OPENAI_API_KEY, if set)
  --endpoint E         completions (default) or chat
  --concurrency C      at most C requests in flight; alone: C clients send back to back
  --request-rate R     Poisson arrivals at R requests/s (exponential gaps, seeded);
                       with --concurrency too, arrivals wait for one of C slots
                       (default without either: --concurrency 1)
  --num-prompts N      requests to send (default 100, or every line of --dataset)
  --input-len I        tokens of each random prompt (default 256)
  --output-len O       max_tokens of each request, with ignore_eos (default 128)
  --prefix-len P       tokens shared by every random prompt, before the I others
                       (default 0): measures prefix caching
  --dataset FILE       JSONL prompts: {"prompt": ...} or {"messages": [...]},
                       optional "max_tokens" per line
  --seed S             seed of the random prompts and arrivals (default 0)
  --json FILE          write the summary and every request's record as JSON
  --timeout S          seconds allowed per request (default 600)
  --temperature T      sample at T, request i with seed S + i (default 0: greedy)
  --compare-speculative
                       prefill every prompt once (unmeasured), then send the
                       prompts four times, speculative decoding on, off,
                       off, on (a sparkd server with [engine] speculative = "ngram";
                       off requests carry "speculative": false), and print both
                       sides with their ratio, the acceptance rate and the mean
                       accepted length (from /metrics)

One warm-up request goes first and is not measured. Ctrl-C stops the run and reports
what was measured; requests in flight count as cancelled. Exit codes: 0 the run
completed and at least one request succeeded (failed requests are reported, not fatal);
1 no request succeeded, or the server could not be asked for a model; 2 usage error;
130 interrupted by ctrl-C (the partial report is printed).
)";
}

namespace {

long long positive_int(const Flags& f, const char* name, long long fallback, long long min_value) {
  long long v = f.get_int(name, fallback);
  if (v < min_value)
    throw InputError(std::string("--") + name + " must be at least " + std::to_string(min_value) + ", got " +
                     std::to_string(v));
  return v;
}

}  // namespace

BenchOptions parse_bench_options(const std::vector<std::string>& args) {
  Flags f(args, {"compare-speculative"});
  f.expect_only({"url", "model", "api-key", "endpoint", "concurrency", "request-rate", "num-prompts", "input-len",
                 "output-len", "prefix-len", "dataset", "seed", "json", "timeout", "temperature"});
  BenchOptions o;
  o.url = f.require("url");
  if (o.url.empty()) throw InputError("--url must not be empty");
  o.model = f.get("model").value_or("");
  if (auto key = f.get("api-key")) {
    o.api_key = *key;
  } else if (const char* env = std::getenv("OPENAI_API_KEY")) {
    o.api_key = env;
  }
  std::string endpoint = f.get("endpoint").value_or("completions");
  if (endpoint == "completions")
    o.endpoint = BenchEndpoint::COMPLETIONS;
  else if (endpoint == "chat")
    o.endpoint = BenchEndpoint::CHAT;
  else
    throw InputError("--endpoint must be completions or chat, got '" + endpoint + "'");

  if (f.has("concurrency")) o.concurrency = size_t(positive_int(f, "concurrency", 1, 1));
  if (f.has("request-rate")) {
    o.request_rate = f.get_double("request-rate", 0);
    if (!(o.request_rate > 0)) throw InputError("--request-rate must be a positive number of requests per second");
  }
  if (!f.has("concurrency") && !f.has("request-rate")) o.concurrency = 1;

  o.dataset = f.get("dataset").value_or("");
  if (!o.dataset.empty()) {
    for (const char* name : {"input-len", "prefix-len"})
      if (f.has(name)) throw InputError(std::string("--") + name + " applies to random prompts, not to --dataset");
  }
  o.num_prompts = size_t(positive_int(f, "num-prompts", o.dataset.empty() ? 100 : 0, o.dataset.empty() ? 1 : 0));
  if (f.has("num-prompts") && o.num_prompts == 0) throw InputError("--num-prompts must be at least 1");
  o.input_len = positive_int(f, "input-len", 256, 1);
  o.output_len = positive_int(f, "output-len", 128, 1);
  o.prefix_len = positive_int(f, "prefix-len", 0, 0);
  o.seed = uint64_t(positive_int(f, "seed", 0, 0));
  o.json_path = f.get("json").value_or("");
  o.timeout_s = f.get_double("timeout", 600);
  if (!(o.timeout_s > 0)) throw InputError("--timeout must be a positive number of seconds");
  o.compare_speculative = f.has("compare-speculative");
  o.temperature = f.get_double("temperature", 0);
  if (!(o.temperature >= 0 && o.temperature <= 2)) throw InputError("--temperature must be in [0, 2]");
  return o;
}

}  // namespace spark
