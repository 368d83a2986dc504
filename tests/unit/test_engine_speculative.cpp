// test_engine_speculative.cpp — speculative decoding through the engine and the CPU
// backend on real models (tiny random-weight ones, and the default 4-bit one): with
// speculation on, every request gives the tokens, logprob bits, text and finish reason it
// gives with speculation off, alone or among 63 others, with prefill chunked and prefixes
// cached; seeded sampling included. Every KV block is free at the end.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/stage_loader.h"
#include "engine/constrain/constraint.h"
#include "engine/core/engine.h"
#include "engine/core/local_executor.h"
#include "engine/model/model_loader.h"
#include "engine/tokenizer/tokenizer.h"

using namespace spark;

namespace {

const char* kTinyLlama = "tests/golden/models/llama";
const char* kTinyMoe = "tests/golden/models/qwen3_moe";
const char* kSmolLM2 = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

class IdDecoder : public TokenDecoder {
 public:
  std::string push(int32_t id) override { return "<" + std::to_string(id) + ">"; }
  std::string flush() override { return ""; }
};

// The CPU backend's cost model allows four rows per step, which 64 sequences exceed
// without a draft; this one says rows are free (as a GPU's does up to hundreds), so that
// batched steps carry drafts too.
class WideCpuBackend : public CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  int64_t rows_at_decode_cost() const override { return 1024; }
};

// A model that costs far more than the other: each forward takes 10 ms more. As the target,
// it is one 10x its draft's size; as the draft, one that does not pay for its drafts
// (the engine stops drafting then: Speculator::observe_step).
class SlowCpuBackend : public WideCpuBackend {
 public:
  using WideCpuBackend::WideCpuBackend;
  void forward(const Batch& batch, const float* hidden_in, ForwardResult& out) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    WideCpuBackend::forward(batch, hidden_in, out);
  }
};

struct Outcome {
  std::vector<RequestOutput> outs;
  MetricsSnapshot metrics;
};

// speculative: drafts by prompt lookup, or from the model at `draft` when one is named
// (kMtp: the model's own MTP head).
const std::string kMtp = "mtp";

Config engine_config(const std::string& path, bool speculative, int64_t budget, const std::string& draft = "") {
  Config config;
  config.model.path = path;
  config.engine.block_size = 4;
  config.engine.max_num_seqs = 128;  // every wave of up to 64 requests runs at once
  config.engine.max_num_batched_tokens = budget;
  config.engine.speculative = !speculative ? "none" : draft.empty() ? "ngram" : draft == kMtp ? "mtp" : "draft";
  if (draft != kMtp) config.engine.speculative_model = draft;
  config.engine.num_speculative_tokens = 4;
  return config;
}

int64_t vocab_of(const std::string& path) { return inspect_model(engine_config(path, false, 8192)).spec.vocab_size; }

// One engine over `path` runs each wave of requests in turn (a wave is submitted at once,
// so it batches; the next waits for it to finish). Outputs in submission order.
Outcome run_waves(const std::string& path, const std::vector<std::vector<Request>>& waves, bool speculative,
                  int64_t budget = 8192, const std::string& draft = "", bool slow_target = false,
                  bool slow_draft = false) {
  const Config config = engine_config(path, speculative, budget, draft);
  LoadedModel model = load_model(config);
  const ModelSpec& spec = model.info.spec;
  std::unique_ptr<Backend> backend = slow_target
                                         ? std::make_unique<SlowCpuBackend>(spec, bind_stage(spec, model.weights), 1)
                                         : std::make_unique<WideCpuBackend>(spec, bind_stage(spec, model.weights), 1);
  std::optional<LoadedModel> draft_model;
  Engine engine(config, std::make_unique<LocalExecutor>(std::move(backend), spec.vocab_size), spec,
                [](bool) { return std::make_unique<IdDecoder>(); }, 1024);
  if (speculative && !draft.empty()) {
    draft_model = draft == kMtp ? load_mtp_head(model.info) : load_model(draft_model_config(config));
    const ModelSpec& ds = draft_model->info.spec;
    std::unique_ptr<Backend> draft_backend =
        slow_draft ? std::make_unique<SlowCpuBackend>(ds, bind_stage(ds, draft_model->weights), 1)
                   : std::make_unique<WideCpuBackend>(ds, bind_stage(ds, draft_model->weights), 1);
    engine.attach_drafter(std::make_unique<DraftModel>(std::move(draft_backend), ds, budget));
  }
  engine.start();
  Outcome o;
  for (const auto& wave : waves) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : wave) streams.push_back(engine.submit(r));
    for (auto& s : streams) {
      RequestOutput all;
      bool first = true;
      for (int i = 0; i < 3000 && !all.finished; ++i) {  // 5 minutes: a hang fails
        auto out = s->pop(std::chrono::milliseconds(100));
        if (!out) continue;
        if (first) all = std::move(*out); else all.merge(std::move(*out));
        first = false;
      }
      REQUIRE(all.finished);
      REQUIRE(all.finish_reason != FinishReason::ERROR);
      o.outs.push_back(std::move(all));
    }
  }
  engine.stop();
  o.metrics = engine.metrics();
  CHECK(o.metrics.kv_blocks_used == 0);
  return o;
}

Outcome run(const std::string& path, const std::vector<Request>& reqs, bool speculative, int64_t budget = 8192) {
  return run_waves(path, {reqs}, speculative, budget);
}

// The chi-square statistic's 0.1% critical value for `dof` degrees of freedom
// (Wilson-Hilferty; within 1% of the exact quantile from a few degrees of freedom up).
double chi_square_critical_001(double dof) {
  const double z = 3.090232;  // the standard normal's 99.9% quantile
  const double a = 2.0 / (9.0 * dof);
  return dof * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

std::vector<uint32_t> logprob_bits(const RequestOutput& o) {
  std::vector<uint32_t> bits;
  for (const auto& lp : o.logprobs) {
    uint32_t b;
    std::memcpy(&b, &lp.logprob, sizeof b);
    bits.push_back(b);
  }
  return bits;
}

// Half the prompts repeat a random phrase (prompt lookup finds drafts at once), half are
// random tokens; some sample at temperature 0.8 with a seed, some stop on a string, a
// token id or EOS, and max_tokens varies so that a run of accepted drafts meets the limit.
std::vector<Request> mixed_requests(int n, int64_t vocab, uint32_t seed, int max_tokens) {
  std::mt19937 rng(seed);
  std::vector<Request> reqs;
  const int32_t top = int32_t(std::min<int64_t>(vocab, 250));
  for (int i = 0; i < n; ++i) {
    Request r;
    r.request_id = "s" + std::to_string(i);
    if (i % 2 == 0) {
      std::vector<int32_t> phrase(3 + rng() % 6);
      for (auto& t : phrase) t = int32_t(3 + rng() % uint32_t(top - 3));
      for (int rep = 0; rep < 4; ++rep) r.prompt_ids.insert(r.prompt_ids.end(), phrase.begin(), phrase.end());
    } else {
      const int len = 1 + int(rng() % 40);
      for (int t = 0; t < len; ++t) r.prompt_ids.push_back(int32_t(3 + rng() % uint32_t(top - 3)));
    }
    r.params.temperature = i % 3 == 2 ? 0.8 : 0.0;
    r.params.seed = 500 + uint64_t(i);
    r.params.max_tokens = 1 + int(rng() % uint32_t(max_tokens));
    r.params.logprobs = true;
    if (i % 5 == 1) r.params.ignore_eos = true;
    if (i % 7 == 3) r.params.stop = {"><"};  // "<a><b>": ends at the second token, mid-run of drafts
    if (i % 7 == 4) r.params.stop_token_ids = {r.prompt_ids[0]};
    reqs.push_back(r);
  }
  return reqs;
}

void check_same(const std::vector<RequestOutput>& got, const std::vector<RequestOutput>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].token_ids == want[i].token_ids);
    CHECK(logprob_bits(got[i]) == logprob_bits(want[i]));
    CHECK(got[i].text == want[i].text);
    CHECK(got[i].finish_reason == want[i].finish_reason);
    CHECK(got[i].num_output_tokens == want[i].num_output_tokens);
  }
}

}  // namespace

TEST_CASE("speculative engine: 64 mixed requests give the same outputs with speculation on and off") {
  for (const char* path : {kTinyLlama, kTinyMoe, kSmolLM2}) {
    CAPTURE(path);
    const int64_t vocab = vocab_of(path);
    const bool big = std::string(path) == kSmolLM2;  // the 4-bit model costs most: shorter outputs
    auto reqs = mixed_requests(64, vocab, 11, big ? 16 : 24);
    const Outcome off = run(path, reqs, false);
    // Batched, with the prompts chunked at two budgets (the second also splits decode
    // steps' drafts against the budget).
    for (int64_t budget : {8192, 136}) {
      CAPTURE(budget);
      const Outcome on = run(path, reqs, true, budget);
      check_same(on.outs, off.outs);
      CHECK(on.metrics.spec_num_draft_tokens > 0);
      CHECK(on.metrics.spec_num_accepted_tokens > 0);
      CHECK(on.metrics.spec_num_accepted_tokens < on.metrics.spec_num_draft_tokens);  // some were rejected
      CHECK(on.metrics.generation_tokens == off.metrics.generation_tokens);
    }
    // Alone (a step holds one sequence, so every draft fits the row budget).
    for (size_t i = 0; i < reqs.size(); i += big ? 16 : 9) {
      CAPTURE(i);
      check_same(run(path, {reqs[i]}, true).outs, {off.outs[i]});
    }
  }
}

TEST_CASE("draft model: 64 mixed requests give the same outputs with a draft model as without drafts") {
  // Drafts from the model itself (greedy drafts all hold), from a lower-bit copy of it,
  // and from another architecture's random weights (most fail), at two step budgets (the
  // second splits the draft's catch-up over several of its forwards).
  const int64_t vocab = vocab_of(kTinyLlama);
  auto reqs = mixed_requests(64, vocab, 11, 24);
  const Outcome off = run(kTinyLlama, reqs, false);
  for (const char* draft : {kTinyLlama, "tests/golden/models/llama_q8_0.gguf", "tests/golden/models/qwen3"}) {
    for (int64_t budget : {8192, 136}) {
      CAPTURE(draft);
      CAPTURE(budget);
      const Outcome on = run_waves(kTinyLlama, {reqs}, true, budget, draft, true);
      check_same(on.outs, off.outs);
      const MetricsSnapshot& m = on.metrics;
      MESSAGE(std::string(draft), " budget ", budget, ": ", m.spec_num_accepted_tokens, " of ", m.spec_num_draft_tokens,
              " drafts accepted");
      CHECK(m.spec_num_draft_tokens > 0);
      CHECK(m.generation_tokens == off.metrics.generation_tokens);
      // The model as its own draft draws each draft as the model draws that token (same
      // seed, same output index), so every draft holds, sampled ones too.
      if (std::string(draft) == kTinyLlama) CHECK(m.spec_num_accepted_tokens == m.spec_num_draft_tokens);
    }
  }
  // The model as its own draft, greedy: every draft holds, which it does only when the
  // draft's KV is right after rejections elsewhere, catch-ups split over forwards, and
  // drafts at every position.
  std::vector<Request> greedy = reqs;
  for (Request& r : greedy) {
    r.params = SamplingParams{};
    r.params.temperature = 0.0;
    r.params.ignore_eos = true;
    r.params.max_tokens = 24;
  }
  for (int64_t budget : {8192, 136}) {
    CAPTURE(budget);
    const MetricsSnapshot m = run_waves(kTinyLlama, {greedy}, true, budget, kTinyLlama, true).metrics;
    CHECK(m.spec_num_draft_tokens > 64 * 8);
    CHECK(m.spec_num_accepted_tokens == m.spec_num_draft_tokens);
  }
  // The same draft when a forward of it costs far more than the model's step: even drafts
  // that all hold do not pay, and after the first request's first measured step the
  // engine stops making them. The outputs stay the same.
  std::vector<std::vector<Request>> one_by_one;
  for (size_t i = 0; i < 8; ++i) one_by_one.push_back({greedy[i]});
  const Outcome costly = run_waves(kTinyLlama, one_by_one, true, 8192, kTinyLlama, false, true);
  MESSAGE("a draft costlier than the model: ", costly.metrics.spec_num_draft_tokens, " drafts in 8 x 24 tokens");
  CHECK(costly.metrics.spec_num_draft_tokens <= 12);
  check_same(costly.outs, run(kTinyLlama, {greedy.begin(), greedy.begin() + 8}, false).outs);
  // Alone, one request after the other in one engine: the draft's KV of a finished
  // sequence's blocks is never taken for a later one's.
  std::vector<std::vector<Request>> waves;
  for (size_t i = 0; i < reqs.size(); i += 7) waves.push_back({reqs[i]});
  const Outcome alone = run_waves(kTinyLlama, waves, true, 8192, "tests/golden/models/llama_q8_0.gguf", true);
  for (size_t w = 0; w < waves.size(); ++w) {
    CAPTURE(w);
    check_same({alone.outs[w]}, {off.outs[w * 7]});
  }
}

TEST_CASE("MTP head: 64 mixed requests give the same outputs with the model's MTP head drafting as without drafts") {
  // The tiny Qwen3.5-MoE with a random MTP layer (most drafts fail): each step's hidden
  // states feed the head, which catches up on prompts chunk by chunk (budget 136 splits
  // them) and on prefix-cached blocks, and its drafts roll the model's recurrent state
  // back. Together, and one request at a time in one engine.
  const char* path = "tests/golden/models/qwen3_5_moe_mtp";
  const int64_t vocab = vocab_of(path);
  auto reqs = mixed_requests(64, vocab, 17, 24);
  const Outcome off = run(path, reqs, false);
  for (int64_t budget : {8192, 136}) {
    CAPTURE(budget);
    const Outcome on = run_waves(path, {reqs}, true, budget, kMtp);
    check_same(on.outs, off.outs);
    MESSAGE("MTP budget ", budget, ": ", on.metrics.spec_num_accepted_tokens, " of ", on.metrics.spec_num_draft_tokens,
            " drafts accepted");
    CHECK(on.metrics.spec_num_draft_tokens > 64 * 2);
    CHECK(on.metrics.generation_tokens == off.metrics.generation_tokens);
  }
  std::vector<std::vector<Request>> waves;
  for (size_t i = 0; i < reqs.size(); i += 7) waves.push_back({reqs[i]});
  const Outcome alone = run_waves(path, waves, true, 8192, kMtp);
  for (size_t w = 0; w < waves.size(); ++w) {
    CAPTURE(w);
    check_same({alone.outs[w]}, {off.outs[w * 7]});
  }
}

TEST_CASE("speculative engine: prefix-cache hits after speculative runs reproduce cold runs") {
  // Speculative runs register blocks in the prefix cache; a later request that reuses them
  // must see exactly the KV a cold run computes (no rejected draft ever reached a hash).
  for (const char* path : {kTinyLlama, kSmolLM2}) {
    CAPTURE(path);
    const int64_t vocab = vocab_of(path);
    auto reqs = mixed_requests(16, vocab, 5, 24);
    for (auto& r : reqs) r.params.ignore_eos = true;
    // Second wave: each prompt extended by its own first-wave output, so its cached blocks
    // cover output tokens the first wave produced speculatively.
    const Outcome first = run(path, reqs, true);
    std::vector<Request> second;
    for (size_t i = 0; i < reqs.size(); ++i) {
      Request r = reqs[i];
      r.request_id += "-again";
      r.prompt_ids.insert(r.prompt_ids.end(), first.outs[i].token_ids.begin(), first.outs[i].token_ids.end());
      second.push_back(r);
    }
    const Outcome cold = run(path, second, false);
    const Outcome warm = run_waves(path, {reqs, second}, true);
    CHECK(warm.metrics.prefix_cache_hits > 0);
    for (size_t i = 0; i < second.size(); ++i) {
      CAPTURE(i);
      CHECK(warm.outs[reqs.size() + i].token_ids == cold.outs[i].token_ids);
      CHECK(logprob_bits(warm.outs[reqs.size() + i]) == logprob_bits(cold.outs[i]));
    }
  }
}

TEST_CASE("speculative verification: at temperature 1 a verified token follows the model's distribution, drafts right or wrong") {
  // The context C: the tiny Llama's third golden sequence up to its second 140. Its
  // next-token distribution comes from the reference logits (transformers), plus the
  // requests' logit_bias on the draft, 71: +8 makes the draft right most of the time,
  // -100 makes it always wrong (every token then comes from the residual). Each sequence
  // prefills C minus its last token, is given 140 as its first output token (so its
  // context is C), then verifies the forced draft 71 in a step of the scheduler and
  // executor the engine runs.
  std::ifstream f(std::string(kTinyLlama) + "/golden.json");
  const auto golden = nlohmann::json::parse(f);
  const auto seq = golden["sequences"][2].get<std::vector<int32_t>>();
  const size_t last = 15;
  REQUIRE(seq[last] == 140);
  std::vector<float> ref(256);
  std::ifstream lf(std::string(kTinyLlama) + "/" + golden["logits"][2].get<std::string>(), std::ios::binary);
  lf.seekg(std::streamoff(last * 256 * sizeof(float)));
  lf.read(reinterpret_cast<char*>(ref.data()), std::streamsize(ref.size() * sizeof(float)));
  REQUIRE(lf);

  const Config config = engine_config(kTinyLlama, true, 8192);
  LoadedModel model = load_model(config);
  const ModelSpec& spec = model.info.spec;
  for (float bias : {8.0f, -100.0f}) {
    CAPTURE(bias);
    std::vector<double> p(256);
    double total = 0;
    for (size_t v = 0; v < 256; ++v) total += p[v] = std::exp(double(ref[v]) + (v == 71 ? bias : 0.0));
    for (double& x : p) x /= total;

    BlockManager blocks(1024, 4, true);
    Scheduler sched({64, 8192, 256, true}, blocks);
    LocalExecutor exec(std::make_unique<CpuBackend>(spec, bind_stage(spec, model.weights), 1), spec.vocab_size);
    exec.prepare(1024, 1024, 4, spec.eos_token_ids, 0);
    auto run_step = [&](const ScheduledStep& step) {
      exec.launch(step);
      std::vector<int32_t> tokens;
      for (const SampleOutput& o : exec.finish_oldest().samples) tokens.push_back(o.token);
      return tokens;
    };
    const int kDraws = 20000;
    std::vector<int64_t> counts(256, 0);
    int64_t accepted = 0;
    for (int first = 0; first < kDraws; first += 64) {
      std::vector<std::unique_ptr<Sequence>> seqs;
      for (int i = first; i < std::min(kDraws, first + 64); ++i) {
        SamplingParams params;
        params.temperature = 1.0;
        params.seed = uint64_t(i) + 1;
        params.max_tokens = 8;
        params.logit_bias = {{71, bias}};
        seqs.push_back(std::make_unique<Sequence>(i + 1, std::vector<int32_t>(seq.begin(), seq.begin() + last), params));
        sched.add(seqs.back().get());
      }
      ScheduledStep prefill = sched.schedule();
      run_step(prefill);
      sched.update(prefill, std::vector<int32_t>(prefill.batch.logits_rows.size(), 140));
      for (auto& s : seqs) s->draft_tokens = {71};
      ScheduledStep verify = sched.schedule();
      const std::vector<int32_t> sampled = run_step(verify);
      REQUIRE(verify.entries.size() == seqs.size());
      for (const StepEntry& e : verify.entries) {
        REQUIRE(e.num_draft_tokens == 1);
        ++counts[size_t(sampled[size_t(e.logits_row)])];
      }
      for (int64_t n : sched.update(verify, sampled)) accepted += n - 1;
      for (auto& s : seqs) sched.finish(s.get(), FinishReason::LENGTH);
    }
    CHECK(blocks.num_free_blocks() == blocks.num_blocks());
    // A draft survives with probability p(71); the emitted token is 71 exactly then.
    CHECK(accepted == counts[71]);
    CHECK(double(accepted) / kDraws == doctest::Approx(p[71]).epsilon(0.05));
    if (bias > 0) CHECK(accepted > kDraws * 8 / 10);
    else CHECK(accepted == 0);

    // Pearson's chi-square over tokens expected at least 5 times, the rest pooled.
    double chi2 = 0, pooled_expected = 0;
    int64_t pooled_observed = 0;
    int bins = 0;
    for (size_t v = 0; v < 256; ++v) {
      const double expected = p[v] * kDraws;
      if (expected < 5) {
        pooled_expected += expected;
        pooled_observed += counts[v];
        continue;
      }
      chi2 += (double(counts[v]) - expected) * (double(counts[v]) - expected) / expected;
      ++bins;
    }
    if (pooled_expected >= 5) {
      chi2 += (double(pooled_observed) - pooled_expected) * (double(pooled_observed) - pooled_expected) / pooled_expected;
      ++bins;
    } else {
      CHECK(double(pooled_observed) <= 5 + 3 * std::sqrt(pooled_expected + 1));
    }
    REQUIRE(bins >= 2);
    INFO("chi-square " << chi2 << " over " << bins - 1 << " degrees of freedom");
    CHECK(chi2 < chi_square_critical_001(bins - 1));
    MESSAGE("bias " << bias << ": p(draft) " << p[71] << ", accepted " << double(accepted) / kDraws << ", chi-square "
                    << chi2 << " < " << chi_square_critical_001(bins - 1) << " (" << bins - 1 << " dof)");
  }
}

TEST_CASE("speculative engine: structured outputs give the same outputs with speculation on and off") {
  // The prompt spells the value twice, so prompt lookup drafts it: constrained rows verify
  // drafts, and each step must leave the matcher on the text kept, not on a rejected draft.
  auto tokenizer = Tokenizer::load(kSmolLM2);
  constrain::ConstraintSpec spec;
  spec.kind = constrain::ConstraintSpec::Kind::JSON_SCHEMA;
  spec.schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},
      "tags":{"type":"array","items":{"type":"string"},"maxItems":3},"count":{"type":"integer"}},
      "required":["name","tags","count"],"additionalProperties":false})";
  auto constraint = constrain::compile_constraint(spec, constrain::TokenTable::from_tokenizer(*tokenizer));
  const std::string example = R"({"name":"alpha beta","tags":["red","green"],"count":42})";
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r;
    r.request_id = "c" + std::to_string(i);
    r.prompt_ids = tokenizer->encode("Copy this JSON: " + example + "\nAgain: " + example + "\nOnce more: ", false);
    r.params.constraint = constraint;
    r.params.temperature = i % 2 ? 0.8 : 0.0;
    r.params.seed = 900 + uint64_t(i);
    r.params.max_tokens = 24 + 6 * i;
    r.params.logprobs = true;
    reqs.push_back(r);
  }
  const Outcome off = run(kSmolLM2, reqs, false);
  const Outcome on = run(kSmolLM2, reqs, true);
  check_same(on.outs, off.outs);
  CHECK(on.metrics.spec_num_accepted_tokens > 0);
  // An output the model ended is a whole value; the first request's max_tokens is below the
  // value's length at a byte per token, which must not end it early with a cut value.
  for (const RequestOutput& out : on.outs) {
    const std::string text = tokenizer->decode(out.token_ids, /*skip_special_tokens=*/true);
    CAPTURE(text);
    REQUIRE(out.finish_reason.has_value());
    if (*out.finish_reason == FinishReason::STOP) CHECK(nlohmann::json::parse(text).is_object());
    else CHECK(out.num_output_tokens == *reqs[&out - on.outs.data()].params.max_tokens);
  }
}
