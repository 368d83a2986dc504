// test_engine_model.cpp — the engine over the CPU backend and real models (tiny
// random-weight ones, and the default 4-bit one): prefix reuse gives a cold run's logits,
// and greedy output is batch invariant among 31 other requests with prefill chunked at
// several budgets.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/engine.h"
#include "engine/core/local_executor.h"
#include "engine/model/model_loader.h"

using namespace spark;

namespace {

const char* kTinyModels[] = {"tests/golden/models/llama", "tests/golden/models/qwen3_moe"};
// Hybrids: each sequence holds a recurrent state slot beside its KV blocks (Qwen3.5's Gated
// DeltaNet layers; Nemotron-H's Mamba-2 blocks).
const char* kTinyHybrids[] = {"tests/golden/models/qwen3_5_moe", "tests/golden/models/nemotron_h"};
// The default model: 4-bit weights, on the quantized matmul paths (`make test` fetches it).
const char* kQuantizedModel = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

class IdDecoder : public TokenDecoder {
 public:
  std::string push(int32_t id) override { return "<" + std::to_string(id) + ">"; }
  std::string flush() override { return ""; }
};

struct ModelEngine {
  LoadedModel model;
  std::unique_ptr<Engine> engine;
};

std::unique_ptr<ModelEngine> make(const std::string& path, int64_t budget, bool prefix_caching, int64_t num_blocks) {
  Config config;
  config.model.path = path;
  config.engine.block_size = 4;
  config.engine.max_num_seqs = 32;
  config.engine.max_num_batched_tokens = budget;
  config.engine.enable_prefix_caching = prefix_caching;
  auto me = std::make_unique<ModelEngine>();
  me->model = load_model(config);
  const ModelSpec& spec = me->model.info.spec;
  auto backend = std::make_unique<CpuBackend>(spec, bind_stage(spec, me->model.weights), 1);
  me->engine = std::make_unique<Engine>(config, std::make_unique<LocalExecutor>(std::move(backend), spec.vocab_size), spec,
                                        [](bool) { return std::make_unique<IdDecoder>(); }, num_blocks);
  return me;
}

RequestOutput collect(RequestStream& stream) {
  RequestOutput all;
  bool first = true;
  for (int i = 0; i < 1200; ++i) {
    auto out = stream.pop(std::chrono::milliseconds(100));
    if (!out) continue;
    if (first) all = std::move(*out); else all.merge(std::move(*out));
    first = false;
    if (all.finished) return all;
  }
  FAIL("request " << stream.request_id() << " did not finish");
  return all;
}

std::vector<RequestOutput> run(const std::string& path, int64_t budget, int64_t num_blocks, const std::vector<Request>& reqs,
                               bool prefix_caching = true) {
  auto me = make(path, budget, prefix_caching, num_blocks);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(me->engine->submit(r));
  me->engine->start();
  std::vector<RequestOutput> outs;
  for (auto& s : streams) outs.push_back(collect(*s));
  for (const auto& o : outs) REQUIRE(o.finish_reason != FinishReason::ERROR);
  return outs;
}

// A cached run against a cold one: the same tokens, and at each the same 20 most likely
// tokens with their logprobs within 1e-5.
void check_same_tokens_and_top_logprobs(const RequestOutput& warm, const RequestOutput& cold) {
  CHECK(warm.token_ids == cold.token_ids);
  REQUIRE(warm.logprobs.size() == cold.logprobs.size());
  for (size_t i = 0; i < warm.logprobs.size(); ++i) {
    CAPTURE(i);
    REQUIRE(warm.logprobs[i].top.size() == 20);
    for (size_t k = 0; k < 20; ++k) {
      CHECK(warm.logprobs[i].top[k].first == cold.logprobs[i].top[k].first);
      CHECK(warm.logprobs[i].top[k].second == doctest::Approx(cold.logprobs[i].top[k].second).epsilon(1e-5));
    }
  }
}

}  // namespace

TEST_CASE("engine + CPU backend: greedy output alone equals output among 31 others, chunked at several budgets") {
  // Not only the same tokens: the same logprob bits, since every kernel computes a row the
  // same way whatever else is in its batch.
  for (const char* path : {kTinyModels[0], kTinyModels[1], kQuantizedModel, kTinyHybrids[0], kTinyHybrids[1]}) {
    CAPTURE(path);
    std::mt19937 rng(7);
    std::vector<Request> reqs;
    for (int i = 0; i < 32; ++i) {
      Request r;
      r.request_id = "m" + std::to_string(i);
      const int len = 1 + static_cast<int>(rng() % 48);
      for (int t = 0; t < len; ++t) r.prompt_ids.push_back(static_cast<int32_t>(3 + rng() % 250));
      r.params.temperature = 0;
      r.params.max_tokens = 6;
      r.params.ignore_eos = true;
      r.params.logprobs = true;
      reqs.push_back(r);
    }
    auto logprob_bits = [](const RequestOutput& o) {
      std::vector<uint32_t> bits;
      for (const auto& lp : o.logprobs) {
        uint32_t b;
        std::memcpy(&b, &lp.logprob, sizeof b);
        bits.push_back(b);
      }
      return bits;
    };
    std::vector<RequestOutput> alone;
    for (const auto& r : reqs) alone.push_back(run(path, 8192, 64, {r})[0]);
    for (int64_t budget : {8192, 61, 32}) {
      CAPTURE(budget);
      auto outs = run(path, budget, 512, reqs);
      for (size_t i = 0; i < reqs.size(); ++i) {
        CAPTURE(i);
        CHECK(outs[i].token_ids == alone[i].token_ids);
        CHECK(logprob_bits(outs[i]) == logprob_bits(alone[i]));
      }
    }
    if (path != kTinyHybrids[0] && path != kTinyHybrids[1]) continue;
    // 40 blocks of 4 tokens for ~900 tokens of requests: sequences are preempted and
    // recomputed, their state slots given back and taken again.
    auto me = make(path, 32, true, 40);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(me->engine->submit(r));
    me->engine->start();
    for (size_t i = 0; i < reqs.size(); ++i) {
      CAPTURE(i);
      const RequestOutput out = collect(*streams[i]);
      CHECK(out.token_ids == alone[i].token_ids);
      CHECK(logprob_bits(out) == logprob_bits(alone[i]));
    }
    CHECK(me->engine->metrics().preemptions > 0);
  }
}

TEST_CASE("engine + CPU backend: a cached prefix reproduces the cold run's logits and reports cached tokens") {
  for (const char* path : kTinyModels) {
    CAPTURE(path);
    Request r;
    r.request_id = "cold";
    for (int t = 0; t < 37; ++t) r.prompt_ids.push_back(3 + (t * 11) % 250);
    r.params.temperature = 0;
    r.params.max_tokens = 5;
    r.params.ignore_eos = true;
    r.params.logprobs = true;
    r.params.top_logprobs = 20;
    auto cold = run(path, 8192, 64, {r}, /*prefix_caching=*/false)[0];
    CHECK(cold.num_cached_tokens == 0);

    auto me = make(path, 8192, true, 64);
    me->engine->start();
    r.request_id = "first";
    auto first = collect(*me->engine->submit(r));
    // A longer prompt sharing the first 37 tokens: 9 full blocks come from the cache.
    Request longer = r;
    longer.request_id = "longer";
    longer.prompt_ids.push_back(77);
    auto extended = collect(*me->engine->submit(longer));
    r.request_id = "warm";
    auto warm = collect(*me->engine->submit(r));

    CHECK(first.num_cached_tokens == 0);
    CHECK(extended.num_cached_tokens == 36);
    CHECK(warm.num_cached_tokens == 36);
    check_same_tokens_and_top_logprobs(warm, cold);
    MetricsSnapshot m = me->engine->metrics();
    CHECK(m.prefix_cache_hits == 72);
  }
}

// A hybrid resumes from state checkpoints, at the exact token: a prompt continuing an
// earlier one's prompt resumes after all of it, the next turn of a conversation after its
// prompt and answer (less the answer's last token, never fed back). Logits as cold.
TEST_CASE("engine + CPU backend: a hybrid resumes the next turn from a state checkpoint with the cold run's logits") {
  auto request = [](const std::string& id, std::vector<int32_t> prompt) {
    Request r;
    r.request_id = id;
    r.prompt_ids = std::move(prompt);
    r.params.temperature = 0;
    r.params.max_tokens = 5;
    r.params.ignore_eos = true;
    r.params.logprobs = true;
    r.params.top_logprobs = 20;
    return r;
  };
  for (const char* path : kTinyHybrids) {
    CAPTURE(path);
    std::vector<int32_t> prompt;
    for (int t = 0; t < 37; ++t) prompt.push_back(3 + (t * 11) % 250);
    auto me = make(path, 8192, true, 64);
    me->engine->start();
    const RequestOutput first = collect(*me->engine->submit(request("first", prompt)));
    std::vector<int32_t> longer = prompt, next_turn = prompt;
    longer.push_back(77);
    next_turn.insert(next_turn.end(), first.token_ids.begin(), first.token_ids.end());
    next_turn.insert(next_turn.end(), {78, 79});
    const RequestOutput extended = collect(*me->engine->submit(request("longer", longer)));
    const RequestOutput turn = collect(*me->engine->submit(request("turn", next_turn)));
    CHECK(first.num_cached_tokens == 0);
    CHECK(extended.num_cached_tokens == 37);  // not a whole number of blocks
    CHECK(turn.num_cached_tokens == 37 + 5 - 1);
    for (const auto& [warm, ids] : {std::pair{extended, longer}, std::pair{turn, next_turn}}) {
      const RequestOutput cold = run(path, 8192, 64, {request("cold", ids)}, /*prefix_caching=*/false)[0];
      check_same_tokens_and_top_logprobs(warm, cold);
    }
  }
}

// Last-token pooling through the whole engine: the prompt runs in chunks beside requests
// that sample, and the result is the backend's final hidden state of the last prompt
// token (test_cpu_forward ties that to transformers' logits), cold and from the cache.
TEST_CASE("engine + CPU backend: a last_hidden_state request returns the final hidden state of its last prompt token") {
  for (const char* path : kTinyModels) {
    CAPTURE(path);
    Request gen;
    gen.request_id = "gen";
    for (int t = 0; t < 23; ++t) gen.prompt_ids.push_back(5 + (t * 7) % 240);
    gen.params.temperature = 0;
    gen.params.max_tokens = 6;
    gen.params.ignore_eos = true;
    Request pooled;
    pooled.request_id = "pooled";
    for (int t = 0; t < 37; ++t) pooled.prompt_ids.push_back(3 + (t * 11) % 250);
    pooled.last_hidden_state = true;
    const auto alone = run(path, 32, 64, {gen})[0];

    auto me = make(path, 32, true, 64);
    const ModelSpec& spec = me->model.info.spec;
    CpuBackend reference(spec, bind_stage(spec, me->model.weights), 1);
    reference.init_kv_cache(16, 4);
    Batch b;
    const auto n = static_cast<int32_t>(pooled.prompt_ids.size());
    b.token_ids = pooled.prompt_ids;
    for (int32_t p = 0; p < n; ++p) {
      b.positions.push_back(p);
      b.slot_mapping.push_back(p);
    }
    b.query_start = {0, n};
    b.context_lens = {n};
    b.max_blocks_per_seq = (n + 3) / 4;
    for (int32_t i = 0; i < b.max_blocks_per_seq; ++i) b.block_tables.push_back(i);
    b.hidden_rows = {n - 1};
    ForwardResult want;
    reference.forward(b, nullptr, want);
    REQUIRE(want.final_hidden.size() == size_t(spec.hidden_size));

    auto s_gen = me->engine->submit(gen);
    auto s_pooled = me->engine->submit(pooled);
    me->engine->start();
    const auto got_gen = collect(*s_gen);
    const auto cold = collect(*s_pooled);
    pooled.request_id = "pooled again";
    const auto warm = collect(*me->engine->submit(pooled));
    CHECK(got_gen.token_ids == alone.token_ids);
    CHECK(got_gen.hidden.empty());
    for (const RequestOutput* o : {&cold, &warm}) {
      CHECK(o->finish_reason == FinishReason::STOP);
      CHECK(o->token_ids.empty());
      CHECK(o->num_output_tokens == 0);
      REQUIRE(o->hidden.size() == want.final_hidden.size());
      for (size_t i = 0; i < o->hidden.size(); ++i)
        CHECK(o->hidden[i] == doctest::Approx(want.final_hidden[i]).epsilon(1e-4).scale(1.0));
    }
    CHECK(warm.num_cached_tokens == 36);
  }
}
