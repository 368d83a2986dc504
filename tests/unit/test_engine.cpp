// test_engine.cpp — the engine loop over a deterministic backend whose logits are a pure
// function of the token context it reads back through the paged KV bookkeeping: batch
// invariance, preemption, prefix reuse, stops, cancellation, failure and metrics.
#include <doctest/doctest.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engine/core/engine.h"
#include "engine/core/local_executor.h"
#include "engine/peer/pipeline_executor.h"
#include "engine/util/check.h"

using namespace spark;

namespace {

constexpr int64_t kVocab = 64;
constexpr int32_t kEos = 63;

uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The "KV cache" holds the token id written to each slot. A row's logits hash the tokens
// at positions 0..p of its sequence read back through its block table, so a wrong slot
// mapping, block table or prefix hit changes the logits.
class ContextBackend : public Backend {
 public:
  std::string describe() const override { return "test"; }
  LayerRange layers() const override { return {0, 1}; }
  size_t kv_block_bytes(int64_t block_size) const override { return static_cast<size_t>(block_size) * 4; }
  void init_kv_cache(int64_t num_blocks, int64_t block_size) override {
    block_size_ = block_size;
    slots_.assign(static_cast<size_t>(num_blocks * block_size), -1);
  }
  void forward(const Batch& b, const float*, ForwardResult& out) override {
    {
      std::unique_lock lock(mu_);
      gate_.wait(lock, [&] { return forwards_ < allowed_; });
      ++forwards_;
      if (forwards_ == fail_at_) throw RuntimeError("injected backend failure");
    }
    for (int32_t t = 0; t < b.num_tokens(); ++t) slots_.at(static_cast<size_t>(b.slot_mapping[t])) = b.token_ids[t];
    out.logits.assign(b.logits_rows.size() * kVocab, 0.0f);
    size_t r = 0;
    for (int32_t s = 0; s < b.num_seqs() && r < b.logits_rows.size(); ++s) {
      if (b.logits_rows[r] >= b.query_start[s + 1]) continue;
      const int32_t pos = b.positions[b.logits_rows[r]];
      uint64_t h = 0x1234;
      for (int32_t p = 0; p <= pos; ++p) {
        const int32_t block = b.block_tables[static_cast<size_t>(s * b.max_blocks_per_seq + p / block_size_)];
        const int32_t tok = slots_.at(static_cast<size_t>(block * block_size_ + p % block_size_));
        REQUIRE(tok >= 0);
        h = mix(h ^ static_cast<uint64_t>(tok + 1));
      }
      for (int64_t v = 0; v < kVocab; ++v)
        out.logits[r * kVocab + v] = static_cast<float>(mix(h + v) % 1000) / 200.0f;
      ++r;
    }
  }
  void set_allowed(int64_t n) {
    {
      std::lock_guard lock(mu_);
      allowed_ = n;
    }
    gate_.notify_all();
  }
  void fail_at(int64_t n) { fail_at_ = n; }

 private:
  int64_t block_size_ = 1;
  std::vector<int32_t> slots_;
  std::mutex mu_;
  std::condition_variable gate_;
  int64_t forwards_ = 0, allowed_ = INT64_MAX, fail_at_ = -1;
};

// Token v reads "v," so stop strings can straddle tokens.
class CommaDecoder : public TokenDecoder {
 public:
  std::string push(int32_t id) override { return std::to_string(id) + ","; }
  std::string flush() override { return ""; }
};

ModelSpec test_spec() {
  ModelSpec spec;
  spec.vocab_size = kVocab;
  spec.max_position_embeddings = 512;
  spec.eos_token_ids = {kEos};
  return spec;
}

Config test_config(int64_t budget, bool prefix_caching = true) {
  Config c;
  c.engine.block_size = 4;
  c.engine.max_num_seqs = 32;
  c.engine.max_num_batched_tokens = budget;
  c.engine.enable_prefix_caching = prefix_caching;
  return c;
}

struct Harness {
  ContextBackend* backend;
  std::unique_ptr<Engine> engine;
};

Harness make_engine(const Config& config, int64_t num_blocks) {
  auto backend = std::make_unique<ContextBackend>();
  ContextBackend* raw = backend.get();
  auto engine = std::make_unique<Engine>(config, std::make_unique<LocalExecutor>(std::move(backend), kVocab), test_spec(),
                                         [](bool) { return std::make_unique<CommaDecoder>(); }, num_blocks);
  return {raw, std::move(engine)};
}

RequestOutput collect(RequestStream& stream) {
  RequestOutput all;
  bool first = true;
  for (int i = 0; i < 600; ++i) {  // a 60 s ceiling so a hang fails instead of blocking CI
    auto out = stream.pop(std::chrono::milliseconds(100));
    if (!out) continue;
    if (first) all = std::move(*out); else all.merge(std::move(*out));
    first = false;
    if (all.finished) return all;
  }
  FAIL("request " << stream.request_id() << " did not finish");
  return all;
}

std::vector<Request> mixed_requests(int n, double temperature) {
  std::mt19937 rng(2024);
  std::vector<Request> reqs;
  for (int i = 0; i < n; ++i) {
    Request r;
    r.request_id = "r" + std::to_string(i);
    const int len = 1 + static_cast<int>(rng() % 60);
    for (int t = 0; t < len; ++t) r.prompt_ids.push_back(static_cast<int32_t>(rng() % (kVocab - 1)));
    if (i % 4 == 0) r.prompt_ids.insert(r.prompt_ids.begin(), {5, 6, 7, 8, 9, 10, 11, 12});  // shared prefix
    r.params.temperature = temperature;
    r.params.seed = 1000 + i;
    r.params.max_tokens = 12;
    reqs.push_back(r);
  }
  return reqs;
}

// Submits everything before the engine starts, so the first steps batch them together.
std::vector<RequestOutput> run_together(const Config& config, int64_t num_blocks, const std::vector<Request>& reqs,
                                        MetricsSnapshot* metrics = nullptr) {
  Harness h = make_engine(config, num_blocks);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(h.engine->submit(r));
  h.engine->start();
  std::vector<RequestOutput> outs;
  for (auto& s : streams) outs.push_back(collect(*s));
  if (metrics) *metrics = h.engine->metrics();
  return outs;
}

}  // namespace

TEST_CASE("engine: a request's output is the same alone and among 31 others, at any prefill budget") {
  for (double temperature : {0.0, 0.8}) {
    CAPTURE(temperature);
    auto reqs = mixed_requests(32, temperature);
    std::vector<std::vector<int32_t>> alone;
    for (const auto& r : reqs) alone.push_back(run_together(test_config(2048), 256, {r})[0].token_ids);
    for (int64_t budget : {2048, 100, 33}) {
      CAPTURE(budget);
      auto outs = run_together(test_config(budget), 256, reqs);
      for (size_t i = 0; i < reqs.size(); ++i) {
        CAPTURE(i);
        CHECK(outs[i].token_ids == alone[i]);
        CHECK(outs[i].finish_reason.has_value());
      }
    }
  }
}

TEST_CASE("engine: preemption under KV pressure changes no output") {
  auto reqs = mixed_requests(32, 0.0);
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : reqs) alone.push_back(run_together(test_config(2048), 256, {r})[0].token_ids);
  MetricsSnapshot m;
  auto outs = run_together(test_config(64), 24, reqs, &m);  // 96 token slots for 32 requests
  for (size_t i = 0; i < reqs.size(); ++i) CHECK(outs[i].token_ids == alone[i]);
  CHECK(m.preemptions > 0);
  CHECK(m.kv_blocks_used == 0);
  CHECK(m.num_running == 0);
}

TEST_CASE("engine: a cached prefix gives the same logits as a cold run and reports cached tokens") {
  Request r;
  r.request_id = "a";
  for (int t = 0; t < 41; ++t) r.prompt_ids.push_back((t * 7) % (kVocab - 1));
  r.params.temperature = 0;
  r.params.max_tokens = 10;
  r.params.logprobs = true;
  r.params.top_logprobs = 5;

  auto cold = run_together(test_config(2048, false), 64, {r})[0];
  CHECK(cold.num_cached_tokens == 0);

  Harness h = make_engine(test_config(2048), 64);
  h.engine->start();
  auto first = collect(*h.engine->submit(r));
  r.request_id = "b";
  auto warm = collect(*h.engine->submit(r));
  CHECK(first.num_cached_tokens == 0);
  CHECK(warm.num_cached_tokens == 40);  // all 10 full blocks of the 41-token prompt
  CHECK(warm.token_ids == cold.token_ids);
  REQUIRE(warm.logprobs.size() == cold.logprobs.size());
  for (size_t i = 0; i < warm.logprobs.size(); ++i) {
    CHECK(warm.logprobs[i].logprob == cold.logprobs[i].logprob);
    CHECK(warm.logprobs[i].top == cold.logprobs[i].top);
  }
  MetricsSnapshot m = h.engine->metrics();
  CHECK(m.prefix_cache_queries == 82);
  CHECK(m.prefix_cache_hits == 40);
}

TEST_CASE("engine: stop strings and stop tokens end the output at the right place") {
  Request r;
  r.request_id = "s";
  r.prompt_ids = {3, 1, 4, 1, 5, 9, 2, 6};
  r.params.temperature = 0;
  r.params.max_tokens = 16;
  r.params.ignore_eos = true;
  auto full = run_together(test_config(2048), 64, {r})[0];
  REQUIRE(full.token_ids.size() == 16);
  CHECK(full.finish_reason == FinishReason::LENGTH);
  std::string expect_text;
  for (int32_t t : full.token_ids) expect_text += std::to_string(t) + ",";
  CHECK(full.text == expect_text);

  // A stop string from the end of token 3's text into token 4's.
  const std::string t3 = std::to_string(full.token_ids[3]), t4 = std::to_string(full.token_ids[4]);
  const std::string stop = t3.substr(t3.size() - 1) + "," + t4;
  const size_t at = expect_text.find(stop);
  Request rs = r;
  rs.params.stop = {stop};
  auto cut = run_together(test_config(2048), 64, {rs})[0];
  CHECK(cut.finish_reason == FinishReason::STOP);
  CHECK(cut.stop_string == stop);
  CHECK(cut.text == expect_text.substr(0, at));
  CHECK(cut.token_ids.size() <= 5);

  // A stop token: included in the ids, its text left out.
  const int32_t tok = full.token_ids[6];
  const size_t first = static_cast<size_t>(std::find(full.token_ids.begin(), full.token_ids.end(), tok) - full.token_ids.begin());
  Request rt = r;
  rt.params.stop_token_ids = {tok};
  auto by_token = run_together(test_config(2048), 64, {rt})[0];
  CHECK(by_token.finish_reason == FinishReason::STOP);
  CHECK(by_token.stop_token == tok);
  CHECK(by_token.token_ids == std::vector<int32_t>(full.token_ids.begin(), full.token_ids.begin() + first + 1));
  std::string before;
  for (size_t i = 0; i < first; ++i) before += std::to_string(full.token_ids[i]) + ",";
  CHECK(by_token.text == before);
}

TEST_CASE("engine: cancel frees the blocks and ends the stream with abort") {
  Harness h = make_engine(test_config(2048), 64);
  h.backend->set_allowed(3);  // the prefill and two decode steps, then the backend waits
  Request r;
  r.request_id = "c";
  r.prompt_ids = {1, 2, 3, 4, 5, 6};
  r.params.temperature = 0;
  r.params.ignore_eos = true;
  auto stream = h.engine->submit(r);
  CHECK_FALSE(h.engine->cancel("nobody"));
  h.engine->start();
  std::vector<int32_t> seen;
  while (seen.size() < 3) {
    auto out = stream->pop(std::chrono::milliseconds(100));
    if (out) seen.insert(seen.end(), out->token_ids.begin(), out->token_ids.end());
  }
  CHECK(h.engine->cancel("c"));
  h.backend->set_allowed(INT64_MAX);
  auto rest = collect(*stream);
  CHECK(rest.finish_reason == FinishReason::ABORT);
  CHECK(h.engine->metrics().kv_blocks_used == 0);
  CHECK(h.engine->metrics().finished(FinishReason::ABORT) == 1);
  CHECK_FALSE(h.engine->cancel("c"));  // no longer live
}

TEST_CASE("engine: cancel of a request still queued") {
  Harness h = make_engine(test_config(2048), 64);
  Request r;
  r.request_id = "w";
  r.prompt_ids = {1, 2, 3};
  auto stream = h.engine->submit(r);
  CHECK(h.engine->cancel("w"));
  h.engine->start();
  auto out = collect(*stream);
  CHECK(out.finish_reason == FinishReason::ABORT);
  CHECK(out.token_ids.empty());
}

TEST_CASE("engine: a backend failure fails every request and marks the engine dead") {
  Harness h = make_engine(test_config(2048), 64);
  h.backend->fail_at(3);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.prompt_ids = {1, 2, static_cast<int32_t>(i)};
    r.params.ignore_eos = true;
    streams.push_back(h.engine->submit(r));
  }
  CHECK(h.engine->state().alive);
  h.engine->start();
  for (auto& s : streams) {
    auto out = collect(*s);
    CHECK(out.finish_reason == FinishReason::ERROR);
    CHECK(out.error.find("injected backend failure") != std::string::npos);
  }
  EngineState st = h.engine->state();
  CHECK_FALSE(st.alive);
  CHECK(st.reason.find("injected backend failure") != std::string::npos);
  Request late;
  late.prompt_ids = {1};
  CHECK_THROWS_AS(h.engine->submit(late), RuntimeError);
}

TEST_CASE("engine: bad requests are refused at submit with the reason") {
  Harness h = make_engine(test_config(2048), 64);  // 256 KV slots: max_model_len 256
  CHECK(h.engine->max_model_len() == 256);
  Request r;
  r.prompt_ids.assign(200, 1);
  r.params.max_tokens = 100;
  CHECK_THROWS_WITH_AS(h.engine->submit(r), doctest::Contains("max_model_len) of 256"), InputError);
  r.prompt_ids = {1, 64};
  r.params.max_tokens = 4;
  CHECK_THROWS_WITH_AS(h.engine->submit(r), doctest::Contains("prompt token 64 at position 1"), InputError);
  r.prompt_ids = {};
  CHECK_THROWS_AS(h.engine->submit(r), InputError);
  r.prompt_ids = {1};
  r.params.top_p = 2;
  CHECK_THROWS_WITH_AS(h.engine->submit(r), doctest::Contains("'top_p'"), InputError);
  r.params.top_p = 1;
  r.request_id = "dup";
  h.engine->submit(r);
  CHECK_THROWS_WITH_AS(h.engine->submit(r), doctest::Contains("already in use"), InputError);
}

TEST_CASE("engine: metrics, timings, heartbeat and stop") {
  auto reqs = mixed_requests(8, 0.0);
  for (auto& r : reqs) r.params.ignore_eos = true;
  Harness h = make_engine(test_config(2048), 256);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(h.engine->submit(r));
  h.engine->start();
  uint64_t prompt_tokens = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto out = collect(*streams[i]);
    prompt_tokens += reqs[i].prompt_ids.size();
    CHECK(out.token_ids.size() == 12);
    CHECK(out.token_times.size() == 12);
    CHECK(out.num_prompt_tokens == static_cast<int64_t>(reqs[i].prompt_ids.size()));
    CHECK(out.timings.queued <= out.timings.scheduled);
    CHECK(out.timings.scheduled <= out.timings.first_token);
    CHECK(out.timings.first_token <= out.timings.last_token);
    CHECK(out.timings.last_token <= out.timings.finished);
  }
  MetricsSnapshot m = h.engine->metrics();
  CHECK(m.prompt_tokens == prompt_tokens);
  CHECK(m.generation_tokens == 8 * 12);
  CHECK(m.finished(FinishReason::LENGTH) == 8);
  CHECK(m.time_to_first_token.count == 8);
  CHECK(m.time_per_output_token.count == 8);
  CHECK(m.e2e_latency.count == 8);
  CHECK(m.queue_time.count == 8);
  CHECK(m.kv_blocks_total == 256);

  const uint64_t beat = h.engine->state().heartbeat;
  for (int i = 0; i < 500 && h.engine->state().heartbeat < beat + 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // bounded wait for the idle tick
  CHECK(h.engine->state().heartbeat >= beat + 2);
  CHECK(h.engine->state().idle);

  // stop() during a step: the step completes, then live requests end with "abort".
  h.backend->set_allowed(0);
  Request r = reqs[0];
  r.request_id = "late";
  auto stream = h.engine->submit(r);
  std::thread stopper([&] { h.engine->stop(); });
  for (int i = 0; i < 500 && h.engine->state().alive; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // bounded: the stopper may start late on a busy machine
  CHECK_FALSE(h.engine->state().alive);
  h.backend->set_allowed(INT64_MAX);
  stopper.join();
  auto out = collect(*stream);
  CHECK(out.finish_reason == FinishReason::ABORT);
  CHECK(out.token_ids.size() <= 1);
  CHECK_THROWS_AS(h.engine->submit(r), RuntimeError);
}

TEST_CASE("engine: stop before start aborts what was queued") {
  Harness h = make_engine(test_config(2048), 64);
  Request r;
  r.prompt_ids = {1, 2, 3};
  auto stream = h.engine->submit(r);
  h.engine->stop();
  auto out = collect(*stream);
  CHECK(out.finish_reason == FinishReason::ABORT);
  CHECK(h.engine->metrics().finished(FinishReason::ABORT) == 1);
}

TEST_CASE("histogram: buckets and quantiles") {
  Histogram hist({1.0, 2.0, 4.0});
  for (double v : {0.5, 1.5, 1.5, 3.0, 10.0}) hist.observe(v);
  CHECK(hist.counts == std::vector<uint64_t>{1, 2, 1, 1});
  CHECK(hist.count == 5);
  CHECK(hist.sum == doctest::Approx(16.5));
  CHECK(hist.quantile(0.5) == doctest::Approx(1.75));  // rank 2.5: 3/4 into (1, 2]
  CHECK(hist.quantile(1.0) == doctest::Approx(4.0));
}

TEST_CASE("engine: a decoder that throws fails its own request only") {
  // Requests with skip_special_tokens = false get a decoder that throws on its third token.
  class ThrowingDecoder : public TokenDecoder {
   public:
    std::string push(int32_t id) override {
      if (++pushed_ == 3) throw InputError("undecodable token " + std::to_string(id));
      return "x";
    }
    std::string flush() override { return ""; }

   private:
    int pushed_ = 0;
  };
  Config config = test_config(2048);
  auto engine = std::make_unique<Engine>(
      config, std::make_unique<LocalExecutor>(std::make_unique<ContextBackend>(), kVocab), test_spec(),
      [](bool skip_special) -> std::unique_ptr<TokenDecoder> {
        if (skip_special) return std::make_unique<CommaDecoder>();
        return std::make_unique<ThrowingDecoder>();
      },
      64);
  Request bad, good;
  bad.prompt_ids = {1, 2, 3};
  bad.params.skip_special_tokens = false;
  good.prompt_ids = {4, 5, 6};
  for (Request* r : {&bad, &good}) {
    r->params.max_tokens = 8;
    r->params.ignore_eos = true;
  }
  auto bad_stream = engine->submit(bad);
  auto good_stream = engine->submit(good);
  engine->start();
  RequestOutput b = collect(*bad_stream), g = collect(*good_stream);
  CHECK(b.finish_reason == FinishReason::ERROR);
  CHECK(b.error.find("undecodable token") != std::string::npos);
  CHECK(g.finish_reason == FinishReason::LENGTH);
  CHECK(g.token_ids.size() == 8);
  CHECK(engine->state().alive);
  CHECK(engine->metrics().kv_blocks_used == 0);
}

// ---- peer mode: the engine as the first stage of a two-stage pipeline ----------------

namespace {

// The first stage: the same context-hashing backend, whose "hidden state" of a row is the
// logits row it would have produced (zeros for rows without logits).
class FirstStage : public ContextBackend {
 public:
  void forward(const Batch& b, const float* in, ForwardResult& out) override {
    ContextBackend::forward(b, in, out);
    out.hidden.assign(size_t(b.num_tokens()) * kVocab, 0.0f);
    for (size_t i = 0; i < b.logits_rows.size(); ++i)
      std::copy_n(out.logits.begin() + std::ptrdiff_t(i * kVocab), kVocab,
                  out.hidden.begin() + std::ptrdiff_t(size_t(b.logits_rows[i]) * kVocab));
    out.logits.clear();
  }
};

// The second stage in process: samples each logits row with the real Sampler from what
// the plans opened, as the worker does, and checks the pipeline's promises.
class FakeRemote : public RemoteStage {
 public:
  std::string problem() const override { return session_ ? "" : "no worker"; }
  uint64_t session() const override { return session_; }
  void send(uint64_t session, const MicroBatchPlan& plan, const StageHidden& sent, int64_t, int64_t) override {
    const std::vector<float> hidden(sent.host.begin(), sent.host.end());
    REQUIRE(session == session_);
    for (int64_t id : plan.closes) shadows_.erase(id);
    for (const SeqOpen& o : plan.opens) shadows_[o.seq_id] = o;
    for (const auto& [pending, _] : pending_)
      for (int64_t id : pending.sample_seq_ids)
        for (int64_t mine : plan.sample_seq_ids) CHECK_MESSAGE(id != mine, "a sequence in two micro-batches at once");
    REQUIRE(hidden.size() == size_t(plan.batch.num_tokens()) * kVocab);
    pending_.emplace_back(plan, hidden);
    max_in_flight = std::max(max_in_flight, pending_.size());
  }
  StepResult receive(uint64_t plan_id, size_t rows, size_t hidden_values) override {
    {
      std::unique_lock lock(gate_mu_);
      gate_.wait(lock, [&] { return !held_; });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a worker takes time
    if (fail_next) {
      fail_next = false;
      session_ = 0;
      pending_.clear();
      shadows_.clear();
      throw PeerLost("the worker vanished");
    }
    REQUIRE(!pending_.empty());
    auto [plan, hidden] = std::move(pending_.front());
    pending_.pop_front();
    REQUIRE(plan.id == plan_id);
    REQUIRE(plan.batch.logits_rows.size() == rows);
    REQUIRE(hidden_values == 0);
    StepResult r;
    r.id = plan_id;
    std::vector<SampleOutput>& samples = r.output.samples;
    for (size_t i = 0; i < rows; ++i) {
      SeqOpen& s = shadows_.at(plan.sample_seq_ids[i]);
      const float* row = hidden.data() + size_t(plan.batch.logits_rows[i]) * kVocab;
      samples.push_back(sampler_.sample(row, s.params, s.tokens, s.num_prompt_tokens, s.seed,
                                        uint64_t(int64_t(s.tokens.size()) - s.num_prompt_tokens)));
      s.tokens.push_back(samples.back().token);
    }
    return r;
  }
  void reconnect() { session_ = 99; }
  // While held, the engine waits for results with its micro-batches in flight.
  void hold(bool on) {
    {
      std::lock_guard lock(gate_mu_);
      held_ = on;
    }
    gate_.notify_all();
  }

  std::atomic<bool> fail_next{false};
  size_t max_in_flight = 0;

 private:
  uint64_t session_ = 7;
  Sampler sampler_{kVocab, {kEos}};
  std::map<int64_t, SeqOpen> shadows_;
  std::deque<std::pair<MicroBatchPlan, std::vector<float>>> pending_;
  std::mutex gate_mu_;
  std::condition_variable gate_;
  bool held_ = false;
};

std::unique_ptr<Engine> pipeline_engine(const Config& config, int64_t num_blocks, FakeRemote& remote) {
  ModelSpec spec = test_spec();
  spec.hidden_size = kVocab;  // the first stage's "hidden states" are logits rows
  return std::make_unique<Engine>(config, std::make_unique<PipelineExecutor>(std::make_unique<FirstStage>(), remote, kVocab, kVocab),
                                  spec, [](bool) { return std::make_unique<CommaDecoder>(); }, num_blocks);
}

}  // namespace

TEST_CASE("pipeline engine: same outputs as one stage, two micro-batches in flight, one per sequence") {
  auto reqs = mixed_requests(32, 0.8);
  std::vector<std::vector<int32_t>> alone;
  for (const auto& r : reqs) alone.push_back(run_together(test_config(2048), 256, {r})[0].token_ids);
  for (int64_t budget : {2048, 33}) {
    CAPTURE(budget);
    FakeRemote remote;
    auto engine = pipeline_engine(test_config(budget), 256, remote);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(engine->submit(r));
    engine->start();
    for (size_t i = 0; i < reqs.size(); ++i) CHECK(collect(*streams[i]).token_ids == alone[i]);
    CHECK(remote.max_in_flight == 2);
    CHECK(engine->metrics().kv_blocks_used == 0);
  }
}

TEST_CASE("pipeline engine: cancels of sequences in flight, and a lost peer that comes back") {
  FakeRemote remote;
  auto engine = pipeline_engine(test_config(2048), 256, remote);
  engine->start();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.prompt_ids = {1, 2, static_cast<int32_t>(i)};
    r.params.ignore_eos = true;
    r.params.max_tokens = 240;  // ~0.5 s at the fake worker's pace: still running when it dies
    streams.push_back(engine->submit(r));
  }
  for (auto& s : streams) REQUIRE(s->pop(std::chrono::seconds(10)).has_value());  // all running
  remote.hold(true);  // every running sequence is now in a micro-batch the worker holds
  for (size_t i = 0; i < 3; ++i) engine->cancel(streams[i]->request_id());
  remote.hold(false);  // the cancels apply as their micro-batches return
  for (size_t i = 0; i < 3; ++i) CHECK(collect(*streams[i]).finish_reason == FinishReason::ABORT);

  remote.hold(true);
  remote.fail_next = true;  // the rest die with the worker; the engine lives on
  remote.hold(false);
  for (size_t i = 3; i < 6; ++i) {
    RequestOutput out = collect(*streams[i]);
    CHECK(out.finish_reason == FinishReason::ERROR);
    CHECK(out.error.find("the worker vanished") != std::string::npos);
  }
  CHECK(engine->state().alive);
  Request late;
  late.prompt_ids = {1, 2, 3};
  late.params.max_tokens = 4;
  late.params.ignore_eos = true;  // its draw is seeded at random: EOS must not end it early
  CHECK_THROWS_WITH_AS(engine->submit(late), doctest::Contains("no worker"), RuntimeError);
  remote.reconnect();
  RequestOutput again = collect(*engine->submit(late));
  CHECK(again.token_ids.size() == 4);
  CHECK(engine->metrics().kv_blocks_used == 0);
}
