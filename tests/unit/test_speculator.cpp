// test_speculator.cpp — the prompt-lookup index against a brute-force scan, the
// acceptance rule, the verification rows, and the per-sequence adaptation and row budget.
#include <doctest/doctest.h>

#include <random>

#include "engine/core/speculator.h"

using namespace spark;

namespace {

// The definition, by rescanning: for n from max_n down to min_n, the latest earlier end
// of the context's last n tokens, and the k tokens that follow it (running on into the
// drafts when the context ends first).
std::vector<int32_t> brute_force(const std::vector<int32_t>& t, int min_n, int max_n, int k) {
  const size_t L = t.size();
  for (int n = max_n; n >= min_n; --n) {
    if (size_t(n) > L) continue;
    for (size_t end = L - 1; end-- > size_t(n - 1);) {
      if (!std::equal(t.begin() + std::ptrdiff_t(end + 1 - size_t(n)), t.begin() + std::ptrdiff_t(end + 1),
                      t.begin() + std::ptrdiff_t(L - size_t(n))))
        continue;
      std::vector<int32_t> v = t;
      for (int i = 0; i < k; ++i) v.push_back(v[end + 1 + size_t(i)]);
      return {v.begin() + std::ptrdiff_t(L), v.end()};
    }
  }
  return {};
}

}  // namespace

TEST_CASE("ngram index: incremental proposals equal a full rescan at every length") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int min_n = 1 + int(rng() % 3), max_n = min_n + int(rng() % 4), k = 1 + int(rng() % 6);
    const int vocab = 2 + int(rng() % 12);  // small vocabularies repeat often
    NgramIndex index(min_n, max_n);
    std::vector<int32_t> tokens;
    for (int len = 0; len < 300; ++len) {
      // Sometimes copy an earlier span (what prompt lookup is for), else a random token.
      if (len > 10 && rng() % 3 == 0) tokens.push_back(tokens[rng() % tokens.size()]);
      else tokens.push_back(int32_t(rng() % uint32_t(vocab)));
      if (rng() % 3 != 0) continue;  // the index catches up over several tokens at once too
      index.extend(tokens);
      CAPTURE(trial);
      CAPTURE(len);
      REQUIRE(index.propose(tokens, k) == brute_force(tokens, min_n, max_n, k));
    }
  }
}

TEST_CASE("ngram index: the longest suffix wins, the latest occurrence, and loops run on") {
  NgramIndex index(1, 3);
  std::vector<int32_t> t = {1, 2, 3, 9, 2, 3, 8, 7, 1, 2, 3};
  index.extend(t);
  // "1 2 3" occurred at the start (followed by 9); "2 3" later (followed by 8).
  CHECK(index.propose(t, 2) == std::vector<int32_t>{9, 2});
  t = {5, 6, 2, 3, 8, 4, 2, 3};
  NgramIndex idx2(1, 3);
  idx2.extend(t);
  CHECK(idx2.propose(t, 1) == std::vector<int32_t>{8});  // "2 3" at its latest earlier place
  std::vector<int32_t> loop = {4, 1, 2, 1, 2, 1, 2};
  NgramIndex idx3(2, 2);
  idx3.extend(loop);
  CHECK(idx3.propose(loop, 5) == std::vector<int32_t>{1, 2, 1, 2, 1});
  std::vector<int32_t> none = {1, 2, 3, 4};
  NgramIndex idx4(2, 3);
  idx4.extend(none);
  CHECK(idx4.propose(none, 4).empty());
  CHECK(idx4.propose(none, 0).empty());
}

TEST_CASE("speculation: drafts are accepted while they equal the samples") {
  const std::vector<int32_t> drafts = {4, 5, 6};
  CHECK(accepted_drafts(drafts, std::vector<int32_t>{4, 5, 6, 9}.data()) == 3);
  CHECK(accepted_drafts(drafts, std::vector<int32_t>{4, 5, 7, 6}.data()) == 2);
  CHECK(accepted_drafts(drafts, std::vector<int32_t>{1, 5, 6, 9}.data()) == 0);
  CHECK(accepted_drafts({}, std::vector<int32_t>{3}.data()) == 0);
}

TEST_CASE("speculation: verification rows see the drafts before them and draw as decoding would") {
  SamplingParams params;
  const std::vector<int32_t> tokens = {10, 11, 12, 20};  // 3 prompt tokens, 1 output
  const std::vector<int32_t> drafts = {21, 22};
  std::vector<int32_t> context;
  SampleRow rows[3];
  verification_rows(params, tokens, 3, 99, drafts, context, rows);
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(rows[i].params == &params);
    CHECK(rows[i].seed == 99);
    CHECK(rows[i].num_prompt_tokens == 3);
    CHECK(rows[i].counter == 1 + i);  // the output index this row draws
    std::vector<int32_t> want = tokens;
    want.insert(want.end(), drafts.begin(), drafts.begin() + std::ptrdiff_t(i));
    CHECK(std::vector<int32_t>(rows[i].context.begin(), rows[i].context.end()) == want);
  }
  SampleRow plain;
  verification_rows(params, tokens, 3, 99, {}, context, &plain);
  CHECK(plain.context.data() == tokens.data());  // no copy without drafts
  CHECK(plain.counter == 1);
}

namespace {

struct SpecFixture {
  explicit SpecFixture(int64_t max_num_seqs = 8) : sched(config(max_num_seqs), blocks) {}
  BlockManager blocks{64, 4, true};
  static SchedulerConfig config(int64_t max_num_seqs) {
    SchedulerConfig c;
    c.max_num_seqs = max_num_seqs;
    c.max_num_batched_tokens = 256;
    c.max_model_len = 200;
    return c;
  }
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;

  // A running sequence whose prompt repeats, so lookup always finds drafts.
  Sequence* add(int64_t id, SamplingParams params = {}) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < 24; ++i) prompt.push_back(1 + i % 6);
    params.max_tokens = params.max_tokens.value_or(50);
    auto s = std::make_unique<Sequence>(id, prompt, params);
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  void prefill() {
    ScheduledStep step = sched.schedule();
    sched.update(step, std::vector<int32_t>(step.batch.logits_rows.size(), 1));  // continues the pattern
  }
};

}  // namespace

TEST_CASE("speculation: proposals respect opt-out, max_tokens and the step's row budget") {
  SpecFixture f;
  Sequence* a = f.add(1);
  SamplingParams off;
  off.speculative = false;
  Sequence* b = f.add(2, off);
  SamplingParams short_params;
  short_params.max_tokens = 3;
  Sequence* c = f.add(3, short_params);
  f.prefill();
  Speculator spec({4, 2, 3});
  spec.propose(f.sched, 100);
  CHECK(a->draft_tokens == std::vector<int32_t>{2, 3, 4, 5});
  CHECK(b->draft_tokens.empty());
  CHECK(c->draft_tokens.size() == 1);  // 1 output token so far, 3 allowed: 1 + drafts <= 2
  // A budget of 5 rows: 3 decode rows leave 2 drafts, taken by the first sequence.
  spec.propose(f.sched, 5);
  CHECK(a->draft_tokens.size() == 2);
  CHECK(c->draft_tokens.empty());
  spec.propose(f.sched, 3);
  CHECK(a->draft_tokens.empty());
  Speculator none({0, 2, 3});
  CHECK_FALSE(none.enabled());
}

// A step's logits rows are one per sequence plus its drafts: they may exceed max_num_seqs
// (backends size logits for the row budget too), so a lone sequence under max_num_seqs =
// 1, and a full batch, still get drafts within the row budget.
TEST_CASE("speculation: drafts are not capped by max_num_seqs, only by the row budget") {
  SpecFixture one(1);
  Sequence* a = one.add(1);
  one.prefill();
  Speculator spec({4, 2, 3});
  spec.propose(one.sched, 8);
  CHECK(a->draft_tokens == std::vector<int32_t>{2, 3, 4, 5});
  spec.propose(one.sched, 3);  // 1 decode row + 2 drafts
  CHECK(a->draft_tokens.size() == 2);

  SpecFixture full(2);
  Sequence* b = full.add(1);
  Sequence* c = full.add(2);
  full.prefill();
  spec.propose(full.sched, 8);  // 2 decode rows + 6 drafts: 4 and 2
  CHECK(b->draft_tokens.size() == 4);
  CHECK(c->draft_tokens.size() == 2);
}

TEST_CASE("speculation: k shrinks to 0 when drafts keep failing, pauses, and grows back") {
  SpecFixture f;
  Sequence* a = f.add(1);
  f.prefill();
  Speculator spec({4, 2, 3});
  spec.propose(f.sched, 100);
  CHECK(spec.current_k(1) == 4);
  spec.observe(*a, 4, 0);
  CHECK(spec.current_k(1) == 2);
  spec.observe(*a, 2, 0);
  CHECK(spec.current_k(1) == 1);
  spec.observe(*a, 1, 0);
  CHECK(spec.current_k(1) == 0);
  spec.propose(f.sched, 100);
  CHECK(a->draft_tokens.empty());  // paused
  for (int i = 0; i < 40; ++i) a->append_token(1 + i % 6), a->num_computed_tokens++;
  spec.propose(f.sched, 100);
  CHECK(a->draft_tokens.size() == 1);  // one draft tried again after the pause
  spec.observe(*a, 1, 1);
  CHECK(spec.current_k(1) == 2);
  spec.observe(*a, 2, 2);
  spec.observe(*a, 3, 3);
  spec.observe(*a, 4, 4);
  CHECK(spec.current_k(1) == 4);  // capped at num_speculative_tokens
  spec.observe(*a, 4, 1);
  CHECK(spec.current_k(1) == 2);
}

TEST_CASE("speculation: a verified step appends the accepted drafts and rolls the rest back") {
  SpecFixture f;
  Sequence* a = f.add(1);
  f.prefill();
  const int64_t before_tokens = a->num_tokens(), free_before = f.blocks.num_free_blocks();
  a->draft_tokens = {2, 3, 4, 5, 6, 1, 2, 3};  // 8 drafts: rows reach two blocks further
  ScheduledStep step = f.sched.schedule();
  REQUIRE(step.entries.size() == 1);
  CHECK(step.entries[0].num_draft_tokens == 8);
  CHECK(step.batch.num_tokens() == 9);
  CHECK(step.batch.logits_rows.size() == 9);
  CHECK(step.batch.token_ids[1] == 2);
  CHECK(f.blocks.num_free_blocks() < free_before - 1);
  // The model agrees with the first two drafts, then says 9.
  std::vector<int32_t> sampled = {2, 3, 9, 0, 0, 0, 0, 0, 0};
  auto appended = f.sched.update(step, sampled);
  CHECK(appended == std::vector<int64_t>{3});
  CHECK(a->num_tokens() == before_tokens + 3);
  CHECK(a->last_token() == 9);
  CHECK(a->num_computed_tokens == a->num_tokens() - 1);
  CHECK(int64_t(a->block_table.size()) == (a->num_computed_tokens + 3) / 4);
  CHECK(a->draft_tokens.empty());
  f.blocks.check_invariants();
}

TEST_CASE("speculation: a draft model drafts only as many tokens as pay for their cost") {
  // Free drafts (lookup) always pay; k drafts at acceptance a give (1 - a^(k+1)) / (1 - a)
  // tokens in 1 + k * cost steps.
  CHECK(paying_drafts(0.5, 0.0, 4) == 4);
  CHECK(paying_drafts(1.0, 1.0, 4) == 0);  // as costly as the model: never faster
  CHECK(paying_drafts(0.9, 0.05, 8) == 8);
  CHECK(paying_drafts(0.5, 0.5, 4) == 0);  // 1.5 tokens in 1.5 steps at best
  // a = 0.8, cost 0.1: rates 1.64, 2.03, 2.27, 2.40 (k = 1..4) keep rising; with cost 0.3:
  // 1.385, 1.525, 1.554, 1.528: three.
  CHECK(paying_drafts(0.8, 0.1, 4) == 4);
  CHECK(paying_drafts(0.8, 0.3, 8) == 3);
  CHECK(paying_drafts(0.0, 0.01, 4) == 0);
}
