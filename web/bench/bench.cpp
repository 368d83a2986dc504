// bench.cpp — `sparkd bench`: builds the prompts, sends a warm-up, runs the timed load,
// and reports (ctrl-C reports what was measured so far).
#include "web/bench/bench.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "engine/util/check.h"
#include "web/bench/bench_client.h"
#include "web/bench/bench_load.h"
#include "web/bench/bench_options.h"
#include "web/bench/bench_prompts.h"
#include "web/bench/bench_report.h"
#include "web/bench/bench_speculative.h"
#include "web/bench/bench_stats.h"

namespace spark {
namespace {

// Set by the first SIGINT; the handler then restores the default so a second ctrl-C
// ends the process at once if the clean stop ever hangs.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  signal(SIGINT, SIG_DFL);
}

class SigintScope {
 public:
  SigintScope() {
    g_interrupted.store(false);
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART;  // blocking calls resume; the main loop polls the flag
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    // A server that hangs up mid-write must not end the benchmark.
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~SigintScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
  }

 private:
  struct sigaction old_int_ {};
  struct sigaction old_pipe_ {};
};

constexpr auto kTick = std::chrono::milliseconds(100);

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Sends the warm-up on a thread of its own so that ctrl-C can break it off.
RequestRecord warm_up(BenchClient& client, BenchEndpoint endpoint, const std::string& body) {
  std::atomic<bool> cancel{false};
  std::optional<RequestRecord> record;
  std::atomic<bool> done{false};
  std::thread t([&] {
    try {
      record = client.stream(endpoint, body, cancel);
    } catch (const std::exception& e) {  // must not escape the thread
      record = RequestRecord{};
      record->error_kind = ErrorKind::OTHER;
      record->error = e.what();
    }
    done.store(true);
  });
  while (!done.load()) {
    if (g_interrupted.load()) {
      cancel.store(true);
      client.interrupt();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  t.join();
  return *record;
}

std::string describe_warmup(const RequestRecord& r) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f s", r.e2e_s);
  if (r.success) return std::string("ok (") + buf + ")";
  return std::string("failed after ") + buf + ": " + error_kind_name(r.error_kind) + ": " + r.error;
}

// Thrown by the token counter when ctrl-C arrives while prompts are being built.
struct Interrupted {};

// The measured prompts; `warmup` receives the warm-up's. Random sets get one prompt more
// than measured for the warm-up, so that it leaves no measured prompt in the server's
// prefix cache (only the shared prefix, which all of them use); a dataset has no spare
// and its first line serves.
PromptSet build_prompts(const BenchOptions& o, BenchRunInfo& info, BenchClient& client, BenchPrompt& warmup) {
  TokenCounter counter = [&](const std::string& text) {
    if (g_interrupted.load()) throw Interrupted{};
    return client.count_tokens(info.model, text);
  };
  PromptSet set;
  if (o.dataset.empty()) {
    std::fprintf(stderr, "sparkd bench: building %zu prompts of %lld tokens for %s\n", o.num_prompts + 1,
                 (long long)(o.prefix_len + o.input_len), info.model.c_str());
    set = random_prompts(o.num_prompts + 1, o.input_len, o.prefix_len, o.seed, counter);
    warmup = set.prompts.back();
    set.prompts.pop_back();
    info.prompt_source = "random";
  } else {
    set = dataset_prompts(o.dataset, o.num_prompts, o.endpoint == BenchEndpoint::CHAT, counter);
    warmup = set.prompts.front();
    info.prompt_source = o.dataset;
  }
  return set;
}

// One timed pass over `bodies`: released at once or by Poisson arrivals, at most
// max_workers in flight, with the progress bar; ctrl-C cancels what is in flight.
struct TimedRun {
  std::vector<RequestRecord> records;
  double duration = 0;  // from the start to the end of the last request, or to the interrupt
  bool interrupted = false;
};

TimedRun timed_run(const BenchOptions& o, BenchClientPool& pool, size_t max_workers,
                   const std::vector<std::string>& bodies, const PromptSet& set) {
  const size_t n = bodies.size();
  std::vector<double> release = o.poisson() ? poisson_arrivals(n, o.request_rate, o.seed) : std::vector<double>(n, 0.0);
  std::vector<std::optional<RequestRecord>> results(n);
  std::atomic<bool> cancel{false};
  std::atomic<size_t> done_count{0}, failed_count{0};
  auto run_start = std::chrono::steady_clock::now();
  auto job = [&](size_t i, size_t worker) {
    if (cancel.load()) return;  // released but never sent
    RequestRecord r;
    double start = seconds_since(run_start);
    try {
      r = pool.get(worker).stream(o.endpoint, bodies[i], cancel);
    } catch (const std::exception& e) {  // a thread must not throw: record it instead
      r.error_kind = ErrorKind::OTHER;
      r.error = e.what();
    }
    r.prompt_index = i;
    r.start_s = start;
    if (!r.prompt_tokens_from_usage) r.prompt_tokens = std::max(0LL, set.prompts[i].tokens);
    if (!r.success) failed_count++;
    results[i] = std::move(r);
    done_count++;
  };
  ProgressBar progress(n);
  std::optional<double> interrupted_at;
  {
    LoadRunner runner(release, max_workers, job);
    if (g_interrupted.load()) {
      interrupted_at = 0.0;  // during the warm-up: nothing was sent
    } else {
      run_start = std::chrono::steady_clock::now();
      runner.start();
      while (!interrupted_at && !runner.wait_for(kTick)) {
        progress.update(done_count.load(), failed_count.load(), seconds_since(run_start));
        if (g_interrupted.load()) interrupted_at = seconds_since(run_start);
      }
      if (interrupted_at) {
        cancel.store(true);
        runner.stop();
        // Repeated: a request may have been about to connect when the first call ran.
        do pool.interrupt_all();
        while (!runner.wait_for(std::chrono::milliseconds(20)));
      }
      runner.join();
    }
  }
  progress.update(done_count.load(), failed_count.load(), seconds_since(run_start));
  progress.finish();

  std::vector<RequestRecord> records;
  double last_end = 0;
  for (auto& r : results)
    if (r) {
      last_end = std::max(last_end, r->start_s + r->e2e_s);
      records.push_back(std::move(*r));
    }
  // Throughput is over the wall time of the timed run: from its start to the end of the
  // last request, or to the interrupt.
  return {std::move(records), interrupted_at ? *interrupted_at : last_end, interrupted_at.has_value()};
}

// --compare-speculative: passes on, off, off, on (drift in the machine's speed cancels),
// each side summarized over its two passes; the drafts' counters come from /metrics
// around the passes with speculation on. An unmeasured pass of every prompt with
// max_tokens 1 goes first, so that no measured pass pays for the prefills the prefix
// cache spares the later ones.
int compare_speculative(BenchRunInfo& info, BenchClientPool& pool, size_t max_workers,
                        const std::vector<std::string>& bodies, const PromptSet& set) {
  const BenchOptions& o = info.options;
  std::vector<std::string> off_bodies, prefill_bodies;
  for (const std::string& b : bodies) {
    nlohmann::json j = nlohmann::json::parse(b);
    j["speculative"] = false;
    off_bodies.push_back(j.dump());
    j["max_tokens"] = 1;
    prefill_bodies.push_back(j.dump());
  }
  std::fprintf(stderr, "sparkd bench: prefilling every prompt once (not measured)\n");
  if (timed_run(o, pool, max_workers, prefill_bodies, set).interrupted) return 130;
  std::vector<RequestRecord> on_records, off_records;
  double on_s = 0, off_s = 0;
  SpecCounters drafts;
  for (bool on : {true, false, false, true}) {
    std::fprintf(stderr, "sparkd bench: pass with speculative decoding %s\n", on ? "on" : "off");
    const SpecCounters before = spec_counters(pool.get(0).metrics_text());
    TimedRun run = timed_run(o, pool, max_workers, on ? bodies : off_bodies, set);
    if (on) {
      SpecCounters delta = spec_counters(pool.get(0).metrics_text()) - before;
      drafts = {drafts.drafts + delta.drafts, drafts.draft_tokens + delta.draft_tokens,
                drafts.accepted_tokens + delta.accepted_tokens, delta.present};
    }
    auto& records = on ? on_records : off_records;
    records.insert(records.end(), run.records.begin(), run.records.end());
    (on ? on_s : off_s) += run.duration;
    if (run.interrupted) {
      info.interrupted = true;
      break;
    }
  }
  const Summary on = summarize(on_records, 2 * bodies.size(), on_s);
  const Summary off = summarize(off_records, 2 * bodies.size(), off_s);
  print_speculative_comparison(stdout, info, on, off, drafts);
  if (info.interrupted) return 130;
  return on.succeeded == 0 || off.succeeded == 0 ? 1 : 0;
}

}  // namespace

int run_bench(const Args& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      std::fputs(bench_usage(), stdout);
      return 0;
    }
  BenchOptions o = parse_bench_options(args);
  BenchTarget target = parse_target(o.url, o.api_key, o.timeout_s);
  if (!o.json_path.empty()) {
    // Fail now rather than after a long run; leave no empty file behind.
    std::error_code ec;
    bool existed = std::filesystem::exists(o.json_path, ec);
    bool writable = bool(std::ofstream(o.json_path, std::ios::app));
    if (!existed) std::filesystem::remove(o.json_path, ec);
    if (!writable) throw InputError("cannot write --json file " + o.json_path);
  }
  SigintScope sigint;

  BenchClient main_client(target);
  BenchRunInfo info;
  info.options = o;
  info.model = o.model.empty() ? main_client.first_model() : o.model;
  info.endpoint_path = o.endpoint == BenchEndpoint::CHAT ? "/v1/chat/completions" : "/v1/completions";

  PromptSet set;
  BenchPrompt warmup_prompt;
  try {
    set = build_prompts(o, info, main_client, warmup_prompt);
  } catch (const Interrupted&) {
    std::fprintf(stderr, "sparkd bench: interrupted before the run started\n");
    return 130;
  }
  size_t n = set.prompts.size();
  if (o.endpoint == BenchEndpoint::CHAT && o.dataset.empty())
    set.length_note += "; the chat template adds its own tokens (see input tokens below)";
  info.length_note = set.length_note;
  info.prefix_tokens = set.prefix_tokens;
  long long known = 0, total_len = 0;
  for (const BenchPrompt& p : set.prompts)
    if (p.tokens >= 0) {
      known++;
      total_len += p.tokens;
    }
  info.mean_prompt_tokens = known ? double(total_len) / double(known) : 0.0;
  if (g_interrupted.load()) {
    std::fprintf(stderr, "sparkd bench: interrupted before the run started\n");
    return 130;
  }

  std::vector<std::string> bodies;
  bodies.reserve(n);
  for (const BenchPrompt& p : set.prompts) {
    nlohmann::json body = request_body(o.endpoint, info.model, p, o.output_len);
    if (o.temperature > 0) {
      body["temperature"] = o.temperature;
      body["seed"] = o.seed + bodies.size();
    }
    bodies.push_back(body.dump());
  }

  size_t max_workers = o.concurrency > 0 ? o.concurrency : n;
  BenchClientPool pool(target, max_workers);
  // The first worker's client sends the warm-up, so its connection is open when timing
  // starts (with --concurrency 1 no measured request pays for a connection).
  RequestRecord warm =
      warm_up(pool.get(0), o.endpoint, request_body(o.endpoint, info.model, warmup_prompt, o.output_len).dump());
  info.warmup = describe_warmup(warm);
  if (!warm.success && warm.error_kind != ErrorKind::CANCELLED)
    std::fprintf(stderr, "sparkd bench: warning: warm-up %s\n", info.warmup.c_str());

  if (o.compare_speculative) return compare_speculative(info, pool, max_workers, bodies, set);
  const TimedRun run = timed_run(o, pool, max_workers, bodies, set);
  const std::vector<RequestRecord>& records = run.records;
  info.interrupted = run.interrupted;
  const double duration = run.duration;
  Summary summary = summarize(records, n, duration);
  print_report(stdout, info, summary);

  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path, std::ios::trunc);
    out << report_json(info, summary, records).dump(2) << "\n";
    if (!out) throw RuntimeError("could not write " + o.json_path);
  }
  if (info.interrupted) return 130;
  if (summary.succeeded == 0) {
    std::fprintf(stderr, "sparkd bench: no request succeeded\n");
    return 1;
  }
  return 0;
}

}  // namespace spark
