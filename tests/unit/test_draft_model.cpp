// test_draft_model.cpp — the draft model's and the MTP head's bookkeeping against a
// recomputation: at every step, whatever the verification accepted before, preemptions
// included, their drafts equal those of one that runs every sequence from its first token.
// Gemma 4's assistant's drafts against transformers' drafting loop.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <span>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/admission.h"
#include "engine/core/draft_model.h"
#include "engine/core/scheduler.h"
#include "engine/model/model_loader.h"

using namespace spark;

namespace {

constexpr int64_t kBlockSize = 4;
constexpr int64_t kMaxSeqs = 6;

// The token ids [lo, lo + span) the tests draw from.
struct TokenRange {
  int32_t lo, span;
  int32_t draw(std::mt19937& rng) const { return lo + int32_t(rng() % uint32_t(span)); }
  int32_t after(int32_t t) const { return lo + (t - lo + 1) % span; }  // another id of the range
};

// kMaxSeqs sequences of up to max_prompt random tokens, each to make 60, added to `sched`.
std::vector<std::unique_ptr<Sequence>> add_sequences(Scheduler& sched, std::mt19937& rng, uint32_t max_prompt,
                                                     TokenRange ids) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < int(kMaxSeqs); ++i) {
    std::vector<int32_t> prompt(1 + rng() % max_prompt);
    for (auto& t : prompt) t = ids.draw(rng);
    SamplingParams p;
    p.max_tokens = 60;
    seqs.push_back(std::make_unique<Sequence>(i + 1, prompt, p));
    seqs.back()->max_tokens = 60;
    sched.add(seqs.back().get());
  }
  return seqs;
}

// 1 to 4 placeholder drafts for each decoding sequence with room for them.
void plan_drafts(const Scheduler& sched, std::mt19937& rng) {
  for (Sequence* s : sched.running())
    if (s->num_uncomputed_tokens() == 1 && s->num_output_tokens() + 5 < s->max_tokens)
      s->draft_tokens.assign(1 + rng() % 4, s->last_token());
}

// Verification: each sequence keeps a random number of its drafts and a token that
// differs from the next one.
std::vector<int32_t> random_verification(const ScheduledStep& step, std::mt19937& rng, TokenRange ids) {
  std::vector<int32_t> sampled(step.batch.logits_rows.size());
  for (const StepEntry& e : step.entries) {
    if (e.logits_row < 0) continue;
    const auto keep = int64_t(rng() % uint32_t(e.num_draft_tokens + 1));
    for (int64_t j = 0; j <= e.num_draft_tokens; ++j) {
      int32_t t = j < keep ? e.seq->draft_tokens[size_t(j)] : ids.draw(rng);
      if (j < e.num_draft_tokens && j >= keep && t == e.seq->draft_tokens[size_t(j)]) t = ids.after(t);
      sampled[size_t(e.logits_row + j)] = t;
    }
  }
  return sampled;
}

// A scheduler's settings for these tests: a step budget of `budget` rows.
SchedulerConfig small_steps(int64_t budget) {
  SchedulerConfig sc;
  sc.max_num_seqs = kMaxSeqs;
  sc.max_num_batched_tokens = budget;
  sc.max_model_len = 256;
  return sc;
}

// `live` drafts for `step`, whose sequences hold the drafts of the recomputation (made on
// `copy`): the same drafts, in the same rows. Returns how many were compared.
int64_t same_drafts(ScheduledStep& step, const ScheduledStep& copy, DraftModel& live) {
  std::vector<std::vector<int32_t>> want;
  for (const StepEntry& e : step.entries) want.push_back(e.seq->draft_tokens);
  live.draft(step);
  int64_t compared = 0;
  for (size_t i = 0; i < step.entries.size(); ++i) {
    CAPTURE(i);
    CHECK(step.entries[i].seq->draft_tokens == want[i]);
    compared += int64_t(want[i].size());
  }
  CHECK(step.batch.token_ids == copy.batch.token_ids);
  return compared;
}

// The sequences of `step` that reached max_tokens finish, and `drafter` forgets them.
void finish_full(const ScheduledStep& step, Scheduler& sched, DraftModel& drafter) {
  for (const StepEntry& e : step.entries)
    if (e.logits_row >= 0 && e.seq->num_output_tokens() >= e.seq->max_tokens) {
      drafter.retire(e.seq->seq_id);
      sched.finish(e.seq, FinishReason::LENGTH);
    }
}

struct Drafters {
  LoadedModel model;
  std::unique_ptr<DraftModel> live, scratch;
};

// Two draft models over the same weights, each with its own KV cache and states.
Drafters drafters(const std::string& path, int64_t num_blocks, int64_t budget) {
  Drafters d{load_model(config_for_model(path)), nullptr, nullptr};
  const ModelSpec& spec = d.model.info.spec;
  for (auto* m : {&d.live, &d.scratch}) {
    *m = std::make_unique<DraftModel>(std::make_unique<CpuBackend>(spec, bind_stage(spec, d.model.weights), 1), spec,
                                      budget);
    (*m)->prepare(num_blocks, kBlockSize, kMaxSeqs, {});
  }
  return d;
}

}  // namespace

TEST_CASE("draft model: drafts equal a recomputation from the first token after any acceptance and preemption") {
  // The tiny Llama (KV only) and the tiny Qwen3.5 (recurrent state: snapshots restored).
  for (const char* path : {"tests/golden/models/llama", "tests/golden/models/qwen3_5"}) {
    CAPTURE(path);
    // Few blocks, so that sequences get preempted and start over; a small step budget, so
    // that catch-ups are split over forwards.
    const int64_t num_blocks = 72, budget = 24;
    Drafters d = drafters(path, num_blocks, budget);
    BlockManager blocks(num_blocks, kBlockSize, false);
    Scheduler sched(small_steps(budget), blocks);
    std::mt19937 rng(3);
    const TokenRange ids{0, 256};
    const auto seqs = add_sequences(sched, rng, 30, ids);
    int64_t compared = 0, restarts = 0;
    while (sched.has_work()) {
      plan_drafts(sched, rng);
      ScheduledStep step = sched.schedule();
      restarts += int64_t(step.preempted.size());
      ScheduledStep copy = step;
      d.scratch->forget_all();
      d.scratch->draft(copy);
      compared += same_drafts(step, copy, *d.live);
      sched.update(step, random_verification(step, rng, ids));
      finish_full(step, sched, *d.live);
    }
    MESSAGE(std::string(path), ": ", compared, " drafts compared, ", restarts, " preemptions");
    CHECK(compared > 200);
    CHECK(restarts > 0);
    CHECK(blocks.num_free_blocks() == num_blocks);
  }
}

namespace {

// What a causal model's final hidden state at a position is a function of: the tokens up
// to it. A stand-in for the model, so that the MTP head's bookkeeping can be checked
// against a recomputation without running the model.
std::vector<float> hidden_after(std::span<const int32_t> tokens, int64_t H) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (const int32_t t : tokens) h = (h ^ uint64_t(t)) * 0x100000001b3ull;
  std::vector<float> v(static_cast<size_t>(H));
  for (float& x : v) {
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    x = float(int64_t(h >> 40) % 2001 - 1000) / 400.0f;
  }
  return v;
}

// The step's hidden rows as the model would return them: row r's state after the tokens
// up to its position (the sequence's, then its drafts).
std::vector<float> model_hidden(const ScheduledStep& step, int64_t H) {
  std::vector<float> out;
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const StepEntry& e = step.entries[i];
    if (e.draft_hidden_row < 0) continue;
    std::vector<int32_t> tokens = e.seq->token_ids;
    tokens.insert(tokens.end(), e.seq->draft_tokens.begin(), e.seq->draft_tokens.begin() + e.num_draft_tokens);
    const int64_t end = step.batch.context_lens[i];
    for (int64_t p = end - e.num_new_tokens; p < end; ++p) {
      const std::vector<float> h = hidden_after(std::span(tokens).first(size_t(p) + 1), H);
      out.insert(out.end(), h.begin(), h.end());
    }
  }
  return out;
}

}  // namespace

TEST_CASE("MTP head: drafts equal a recomputation from the first position after any acceptance and preemption") {
  // The head of the tiny Qwen3.5-MoE; the model's hidden states are stood in for. The
  // recomputation gets every position's hidden state at once and runs the head over the
  // whole sequence; the live head gets them step by step, through observe().
  const int64_t num_blocks = 72, budget = 24;
  const LoadedModel head = load_mtp_head(inspect_model(config_for_model("tests/golden/models/qwen3_5_moe_mtp")));
  const ModelSpec& spec = head.info.spec;
  const int64_t H = spec.hidden_size;
  auto make = [&] {
    auto m = std::make_unique<DraftModel>(std::make_unique<CpuBackend>(spec, bind_stage(spec, head.weights), 1), spec,
                                          budget);
    m->prepare(num_blocks, kBlockSize, kMaxSeqs, {});
    return m;
  };
  std::unique_ptr<DraftModel> live = make(), scratch = make();
  REQUIRE(live->reads_model_hidden());
  BlockManager blocks(num_blocks, kBlockSize, false);
  SchedulerConfig sc = small_steps(budget);
  sc.hidden_for_drafts = true;
  Scheduler sched(sc, blocks);
  std::mt19937 rng(5);
  const TokenRange ids{3, 253};
  const auto seqs = add_sequences(sched, rng, 40, ids);
  int64_t compared = 0, restarts = 0;
  while (sched.has_work()) {
    plan_drafts(sched, rng);
    ScheduledStep step = sched.schedule();
    restarts += int64_t(step.preempted.size());
    // The recomputation: every hidden state up to the sequence's second-to-last token, as
    // one step of all of them would give.
    ScheduledStep copy = step;
    scratch->forget_all();
    for (const StepEntry& e : step.entries) {
      if (e.num_draft_tokens == 0 || e.seq->num_tokens() < 2) continue;
      StepEntry all = e;
      all.num_new_tokens = e.seq->num_tokens();
      all.num_draft_tokens = 0;
      all.draft_hidden_row = 0;
      ScheduledStep one;
      one.entries = {all};
      one.batch.context_lens = {int32_t(all.num_new_tokens)};
      std::vector<float> h;
      for (int64_t p = 0; p < all.num_new_tokens; ++p) {
        const std::vector<float> row = hidden_after(std::span(e.seq->token_ids).first(size_t(p) + 1), H);
        h.insert(h.end(), row.begin(), row.end());
      }
      scratch->observe(one, h);
    }
    scratch->draft(copy);
    compared += same_drafts(step, copy, *live);
    // The model's hidden states of the step go to the head once the verification ran.
    const std::vector<float> hidden = model_hidden(step, H);
    REQUIRE(hidden.size() == step.batch.hidden_rows.size() * size_t(H));
    sched.update(step, random_verification(step, rng, ids));
    live->observe(step, hidden);
    finish_full(step, sched, *live);
  }
  MESSAGE("MTP head: ", compared, " drafts compared, ", restarts, " preemptions, ", live->forwards(), " forwards");
  CHECK(compared > 200);
  CHECK(restarts > 0);
  CHECK(blocks.num_free_blocks() == num_blocks);
}

TEST_CASE("Gemma 4's assistant: through the scheduler's steps, the drafts of transformers' drafting loop") {
  // tests/gen/gen_gemma4_assistant.py: after each prompt, the model's next token and the three
  // tokens transformers' Gemma 4 assistant drafts greedily after it (each fed back, every
  // draft at the same position, over the model's K and V of the prompt).
  std::ifstream f("tests/golden/models/gemma4_assistant/assistant_golden.json");
  REQUIRE(f.good());
  const auto j = nlohmann::json::parse(f);
  const LoadedModel model = load_model(config_for_model("tests/golden/models/gemma4"));
  const LoadedModel assistant = load_model(config_for_model("tests/golden/models/gemma4_assistant"));
  const ModelSpec& ms = model.info.spec;
  const ModelSpec& as = assistant.info.spec;
  const int64_t num_blocks = 64, budget = 64;
  CpuBackend target(ms, bind_stage(ms, model.weights), 1);
  target.init_kv_cache(num_blocks, kBlockSize);
  auto backend = std::make_unique<CpuBackend>(as, bind_stage(as, assistant.weights), 1);
  backend->attach_model(target);
  DraftModel drafter(std::move(backend), as, budget);
  drafter.prepare(num_blocks, kBlockSize, kMaxSeqs, {});
  REQUIRE(drafter.reads_model_hidden());
  BlockManager blocks(num_blocks, kBlockSize, false);
  SchedulerConfig sc = small_steps(budget);
  sc.hidden_for_drafts = true;
  Scheduler sched(sc, blocks);
  int64_t id = 0;
  for (const auto& c : j["cases"]) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    std::vector<int32_t> want = c["draft_inputs"].get<std::vector<int32_t>>();
    const int32_t next = want.front();
    CAPTURE(prompt.size());
    // The drafts: each fed-back token after the first, then the assistant's argmax after the last.
    std::ifstream lf("tests/golden/models/gemma4_assistant/" + c["logits"].get<std::string>(), std::ios::binary);
    std::vector<float> last(size_t(as.vocab_size) * want.size());
    lf.read(reinterpret_cast<char*>(last.data()), std::streamsize(last.size() * 4));
    REQUIRE(lf.gcount() == std::streamsize(last.size() * 4));
    want.erase(want.begin());
    want.push_back(int32_t(std::max_element(last.end() - as.vocab_size, last.end()) - (last.end() - as.vocab_size)));
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 8;
    Sequence seq(++id, prompt, p);
    seq.max_tokens = 8;
    sched.add(&seq);
    // The prompt's step: the model's final hidden states go to the drafter (it keeps the last).
    ScheduledStep step = sched.schedule();
    ForwardResult out;
    target.forward(step.batch, nullptr, out);
    REQUIRE(out.final_hidden.size() == prompt.size() * size_t(ms.hidden_size));
    sched.update(step, {next});
    drafter.observe(step, out.final_hidden);
    // The next step verifies three drafts, which the assistant makes.
    seq.draft_tokens.assign(3, seq.last_token());
    ScheduledStep verify = sched.schedule();
    REQUIRE(verify.entries.size() == 1);
    REQUIRE(verify.entries[0].num_draft_tokens == 3);
    drafter.draft(verify);
    CHECK(seq.draft_tokens == want);
    sched.finish(&seq, FinishReason::ABORT);
    drafter.retire(seq.seq_id);
  }
  CHECK(drafter.forwards() == 3 * int64_t(j["cases"].size()));  // the draft rows only: no K and V to catch up on
  CHECK(blocks.num_free_blocks() == num_blocks);
}
