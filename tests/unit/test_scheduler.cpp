// test_scheduler.cpp — budgets, chunked prefill, the flat Batch, preemption and resume,
// abort in every state, and the max_model_len check.
#include <doctest/doctest.h>

#include <memory>
#include <numeric>

#include "engine/core/admission.h"
#include "engine/core/scheduler.h"
#include "engine/core/state_checkpoints.h"
#include "engine/util/check.h"

using namespace spark;

namespace {

std::unique_ptr<Sequence> make_seq(int64_t id, int32_t first_token, int32_t len, int64_t max_tokens,
                                   const Scheduler& sched) {
  std::vector<int32_t> prompt(static_cast<size_t>(len));
  std::iota(prompt.begin(), prompt.end(), first_token);
  SamplingParams p;
  p.max_tokens = max_tokens;
  auto seq = std::make_unique<Sequence>(id, prompt, p);
  seq->max_tokens = Admission(1 << 20, sched.config().max_model_len).check(seq->prompt_ids(), p);
  return seq;
}

std::vector<Sequence*> seqs_of(const ScheduledStep& step) {
  std::vector<Sequence*> out;
  for (const StepEntry& e : step.entries) out.push_back(e.seq);
  return out;
}
std::vector<int64_t> new_tokens_of(const ScheduledStep& step) {
  std::vector<int64_t> out;
  for (const StepEntry& e : step.entries) out.push_back(e.num_new_tokens);
  return out;
}
std::vector<int32_t> logits_rows_of(const ScheduledStep& step) {
  std::vector<int32_t> out;
  for (const StepEntry& e : step.entries) out.push_back(e.logits_row);
  return out;
}

// Runs one step as the engine would, sampling `token` for every logits row, and finishes
// sequences that reached max_tokens.
ScheduledStep run_step(Scheduler& sched, int32_t token) {
  ScheduledStep step = sched.schedule();
  sched.update(step, std::vector<int32_t>(step.batch.logits_rows.size(), token));
  for (const StepEntry& e : step.entries)
    if (e.logits_row >= 0 && e.seq->num_output_tokens() >= e.seq->max_tokens) sched.finish(e.seq, FinishReason::LENGTH);
  sched.blocks().check_invariants();
  return step;
}

SchedulerConfig config(int64_t seqs, int64_t tokens, int64_t max_len, bool chunked = true) {
  SchedulerConfig c;
  c.max_num_seqs = seqs;
  c.max_num_batched_tokens = tokens;
  c.max_model_len = max_len;
  c.enable_chunked_prefill = chunked;
  return c;
}

}  // namespace

TEST_CASE("scheduler: token budget, chunked prefill and the flat batch") {
  BlockManager bm(16, 4, true);
  Scheduler sched(config(2, 16, 32), bm);
  auto a = make_seq(1, 1, 10, 4, sched), b = make_seq(2, 21, 10, 4, sched), c = make_seq(3, 41, 10, 4, sched);
  sched.add(a.get());
  sched.add(b.get());
  sched.add(c.get());

  ScheduledStep s1 = sched.schedule();
  REQUIRE(seqs_of(s1) == std::vector<Sequence*>{a.get(), b.get()});
  CHECK(new_tokens_of(s1) == std::vector<int64_t>{10, 6});  // b is chunked to the 6 tokens left
  const Batch& b1 = s1.batch;
  CHECK(b1.token_ids == std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 21, 22, 23, 24, 25, 26});
  CHECK(b1.positions == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5});
  CHECK(b1.slot_mapping == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17});
  CHECK(b1.query_start == std::vector<int32_t>{0, 10, 16});
  CHECK(b1.context_lens == std::vector<int32_t>{10, 6});
  CHECK(b1.max_blocks_per_seq == 3);
  CHECK(b1.block_tables == std::vector<int32_t>{0, 1, 2, 3, 4, 0});
  CHECK(b1.logits_rows == std::vector<int32_t>{9});  // b's chunk ends mid-prompt: no logits
  CHECK(logits_rows_of(s1) == std::vector<int32_t>{0, -1});
  CHECK(sched.waiting().size() == 1);
  sched.update(s1, {99});
  CHECK(a->output_ids() == std::vector<int32_t>{99});
  CHECK(b->num_computed_tokens == 6);
  CHECK(b->num_output_tokens() == 0);

  ScheduledStep s2 = sched.schedule();
  REQUIRE(seqs_of(s2) == std::vector<Sequence*>{a.get(), b.get()});  // c waits: max_num_seqs = 2
  CHECK(new_tokens_of(s2) == std::vector<int64_t>{1, 4});
  CHECK(s2.batch.token_ids == std::vector<int32_t>{99, 27, 28, 29, 30});
  CHECK(s2.batch.positions == std::vector<int32_t>{10, 6, 7, 8, 9});
  CHECK(s2.batch.slot_mapping == std::vector<int32_t>{10, 18, 19, 20, 21});
  CHECK(s2.batch.context_lens == std::vector<int32_t>{11, 10});
  CHECK(s2.batch.logits_rows == std::vector<int32_t>{0, 4});
  CHECK(b->block_table == std::vector<int32_t>{3, 4, 5});
  sched.update(s2, {50, 60});
  CHECK(a->output_ids() == std::vector<int32_t>{99, 50});
  CHECK(b->output_ids() == std::vector<int32_t>{60});
}

TEST_CASE("scheduler: decode rows come before partial prefills") {
  BlockManager bm(32, 4, true);
  Scheduler sched(config(4, 10, 64), bm);
  auto x = make_seq(1, 1, 9, 1, sched), a = make_seq(2, 100, 22, 4, sched);
  sched.add(x.get());
  sched.add(a.get());
  ScheduledStep s1 = run_step(sched, 5);  // x: 9 prompt tokens, a: 1
  CHECK(new_tokens_of(s1) == std::vector<int64_t>{9, 1});
  CHECK(x->is_finished());
  auto b = make_seq(3, 200, 2, 3, sched);
  sched.add(b.get());
  ScheduledStep s2 = run_step(sched, 5);  // a takes the whole budget: b waits
  CHECK(seqs_of(s2) == std::vector<Sequence*>{a.get()});
  CHECK(new_tokens_of(s2) == std::vector<int64_t>{10});
  run_step(sched, 5);  // a: 10 more (21 of 22)
  ScheduledStep s4 = run_step(sched, 5);  // a: last prompt token, b: its 2 tokens
  CHECK(seqs_of(s4) == std::vector<Sequence*>{a.get(), b.get()});
  CHECK(new_tokens_of(s4) == std::vector<int64_t>{1, 2});
  ScheduledStep s5 = run_step(sched, 5);
  CHECK(new_tokens_of(s5) == std::vector<int64_t>{1, 1});
}

TEST_CASE("scheduler: without chunked prefill a prompt waits for a budget that fits it whole") {
  BlockManager bm(16, 4, true);
  Scheduler sched(config(4, 16, 16, false), bm);
  auto a = make_seq(1, 1, 10, 2, sched), b = make_seq(2, 21, 10, 2, sched);
  sched.add(a.get());
  sched.add(b.get());
  ScheduledStep s1 = run_step(sched, 7);
  CHECK(seqs_of(s1) == std::vector<Sequence*>{a.get()});
  ScheduledStep s2 = run_step(sched, 7);  // a decodes 1; b fits now (1 + 10 <= 16)
  CHECK(seqs_of(s2) == std::vector<Sequence*>{a.get(), b.get()});
  CHECK(new_tokens_of(s2) == std::vector<int64_t>{1, 10});
}

TEST_CASE("scheduler: an encoder's prompts run whole, and each returns its first row") {
  BlockManager bm(16, 4, false);
  SchedulerConfig c = config(4, 16, 16, false);
  c.whole_prompts = true;
  Scheduler sched(c, bm);
  auto a = make_seq(1, 1, 6, 1, sched), b = make_seq(2, 21, 5, 1, sched), d = make_seq(3, 41, 9, 1, sched);
  for (auto* s : {a.get(), b.get(), d.get()}) {
    s->returns_hidden = true;
    sched.add(s);
  }
  ScheduledStep s1 = sched.schedule();
  CHECK(seqs_of(s1) == std::vector<Sequence*>{a.get(), b.get()});  // 6 + 5; d's 9 waits whole
  CHECK(new_tokens_of(s1) == std::vector<int64_t>{6, 5});
  CHECK(s1.batch.hidden_rows == std::vector<int32_t>{0, 6});
  CHECK(s1.batch.logits_rows.empty());
}

TEST_CASE("scheduler: out of blocks the newest is preempted, then resumes by recompute and finishes") {
  BlockManager bm(4, 2, true);
  Scheduler sched(config(4, 16, 8), bm);
  auto a = make_seq(1, 1, 3, 5, sched), b = make_seq(2, 11, 3, 5, sched);
  sched.add(a.get());
  sched.add(b.get());
  run_step(sched, 90);  // both prefilled: a [0 1], b [2 3]
  CHECK(a->block_table == std::vector<int32_t>{0, 1});
  CHECK(b->block_table == std::vector<int32_t>{2, 3});
  run_step(sched, 91);  // both decode inside their second block
  CHECK(bm.num_free_blocks() == 0);

  ScheduledStep s3 = sched.schedule();  // a needs a third block: b (newest) is preempted
  CHECK(s3.preempted == std::vector<Sequence*>{b.get()});
  CHECK(seqs_of(s3) == std::vector<Sequence*>{a.get()});
  CHECK(b->status == SeqStatus::PREEMPTED);
  CHECK(b->block_table.empty());
  CHECK(b->num_computed_tokens == 0);
  CHECK(sched.waiting().front() == b.get());
  CHECK(a->block_table == std::vector<int32_t>{0, 1, 3});  // b's last block, evicted first
  CHECK(sched.num_preemptions() == 1);
  sched.update(s3, {92});

  int guard = 0;
  while (!a->is_finished() && ++guard < 10) run_step(sched, 93);
  CHECK(a->output_ids() == std::vector<int32_t>{90, 91, 92, 93, 93});
  CHECK(a->finish_reason == FinishReason::LENGTH);
  // b resumes: its 3 prompt + 2 output tokens are recomputed in one chunk with logits.
  ScheduledStep resume = sched.schedule();
  REQUIRE(seqs_of(resume) == std::vector<Sequence*>{b.get()});
  CHECK(new_tokens_of(resume)[0] + b->num_cached_tokens == 5);
  CHECK(resume.batch.logits_rows.size() == 1);
  sched.update(resume, {94});
  CHECK(b->status == SeqStatus::RUNNING);
  while (!b->is_finished() && ++guard < 20) run_step(sched, 95);
  CHECK(b->output_ids() == std::vector<int32_t>{90, 91, 94, 95, 95});
  CHECK(bm.num_free_blocks() == 4);
  CHECK_FALSE(sched.has_work());
}

TEST_CASE("scheduler: with recurrent state, drafts are verified from a snapshot, and rejected ones restore it") {
  BlockManager bm(32, 4, false);
  SchedulerConfig c = config(2, 64, 64);
  c.first_state_slot = 0;
  c.snapshot_offset = 2;
  Scheduler sched(c, bm);
  auto a = make_seq(1, 1, 5, 20, sched);
  sched.add(a.get());
  ScheduledStep prefill = run_step(sched, 50);  // prompt [1..5], then 50
  CHECK(prefill.batch.state_copies.empty());
  const int32_t slot = a->state_slot, snapshot = slot + 2;
  // Three drafts, all kept: the snapshot is taken and not needed.
  a->draft_tokens = {51, 52, 53};
  ScheduledStep verify = sched.schedule();
  CHECK(verify.batch.state_copies == std::vector<int32_t>{slot, snapshot});
  sched.update(verify, {51, 52, 53, 54});
  CHECK(a->num_computed_tokens == 9);  // 1..5, 50, 51, 52, 53; 54 is next
  CHECK(!a->restore_state);
  // Three drafts, the second rejected: the state goes back and the kept tokens are redone.
  a->draft_tokens = {55, 56, 57};
  verify = sched.schedule();
  CHECK(verify.batch.state_copies == std::vector<int32_t>{slot, snapshot});
  sched.update(verify, {55, 60, 61, 62});  // 55 kept, 60 instead of 56
  CHECK(a->restore_state);
  CHECK(a->num_computed_tokens == 9);  // nothing of the step stays computed
  CHECK(a->token_ids.back() == 60);
  ScheduledStep redo = sched.schedule();
  CHECK(redo.batch.state_copies == std::vector<int32_t>{snapshot, slot});
  CHECK(new_tokens_of(redo) == std::vector<int64_t>{3});  // 54, 55 and 60 as one chunk
  CHECK(std::vector<int32_t>(redo.batch.token_ids) == std::vector<int32_t>{54, 55, 60});
  sched.update(redo, {70});
  CHECK(!a->restore_state);
  CHECK(a->num_computed_tokens == 12);
  sched.finish(a.get(), FinishReason::ABORT);
  CHECK(bm.num_free_blocks() == 32);
}

TEST_CASE("scheduler: state checkpoints resume each turn at its exact token, and shared prompts where they part") {
  BlockManager bm(64, 4, true);
  SchedulerConfig c = config(2, 64, 128);
  c.first_state_slot = 0;
  StateCheckpoints saved(2, 8, bm, 4);  // state slots 2..9
  Scheduler sched(c, bm, &saved);
  auto run = [&](Sequence* seq, int32_t token) {  // to its end; the first step's plan
    sched.add(seq);
    ScheduledStep first = run_step(sched, token);
    while (!seq->is_finished()) run_step(sched, ++token);
    return first;
  };
  auto copy_of = [](const ScheduledStep& step, int32_t to) {  // the slot copied to `to`, -1: none
    int32_t from = -1;
    for (size_t i = 0; i < step.batch.state_copies.size(); i += 2)
      if (step.batch.state_copies[i + 1] == to) from = step.batch.state_copies[i];
    return from;
  };

  // Turn 1: prompt 1..10, answer 50 51 52. Checkpoints at the prompt's end (10 tokens) and
  // the answer's (12: 52 is never fed back).
  auto a = make_seq(1, 1, 10, 3, sched);
  CHECK(run(a.get(), 50).entries[0].num_new_tokens == 10);
  CHECK(saved.size() == 2);
  // Turn 2 continues it: it resumes after 12 tokens, three whole blocks, from the answer's state.
  std::vector<int32_t> turn2 = a->token_ids;
  turn2.insert(turn2.end(), {60, 61});
  auto b = std::make_unique<Sequence>(2, turn2, a->params);
  b->max_tokens = 2;
  ScheduledStep resumed = run(b.get(), 70);
  CHECK(b->num_cached_tokens == 12);
  CHECK(new_tokens_of(resumed) == std::vector<int64_t>{3});  // 52 60 61
  CHECK(resumed.batch.positions.front() == 12);
  CHECK(copy_of(resumed, resumed.batch.state_slots[0]) >= 2);  // from a checkpoint
  CHECK(resumed.batch.block_copies.empty());
  // A branch after turn 1's prompt resumes at token 10, mid-block: its third block is a copy
  // of the block the checkpoint pins.
  std::vector<int32_t> branch(a->token_ids.begin(), a->token_ids.begin() + 10);
  branch.insert(branch.end(), {80, 81, 82});
  auto d = std::make_unique<Sequence>(3, branch, a->params);
  d->max_tokens = 2;
  sched.add(d.get());
  ScheduledStep mid = sched.schedule();
  CHECK(d->num_cached_tokens == 10);
  CHECK(mid.batch.positions.front() == 10);
  REQUIRE(mid.batch.block_copies.size() == 2);
  CHECK(mid.batch.block_copies[1] == d->block_table[2]);
  CHECK(bm.ref_count(mid.batch.block_copies[0]) == 1);  // held by the checkpoint alone
  CHECK(copy_of(mid, d->state_slot) >= 2);
  sched.update(mid, {90});
  while (!d->is_finished()) run_step(sched, 91);

  // A shared system prompt: x leaves checkpoints whose tokens y shares for 20; y's prefill
  // stops there for a step and saves one, which z then resumes from.
  auto with_system = [](int64_t id, std::vector<int32_t> tail) {
    std::vector<int32_t> t(20);
    std::iota(t.begin(), t.end(), 100);
    t.insert(t.end(), tail.begin(), tail.end());
    auto seq = std::make_unique<Sequence>(id, t, SamplingParams{});
    seq->max_tokens = 2;
    return seq;
  };
  auto x = with_system(4, {1, 2, 3, 4, 5}), y = with_system(5, {6, 7, 8, 9, 10}), z = with_system(6, {11, 12, 13});
  run(x.get(), 30);
  const ScheduledStep y_first = run(y.get(), 30);
  CHECK(y->num_cached_tokens == 0);
  CHECK(new_tokens_of(y_first) == std::vector<int64_t>{20});
  CHECK(y_first.batch.logits_rows.empty());
  run(z.get(), 30);
  CHECK(z->num_cached_tokens == 20);

  // Every block comes back once the checkpoints go.
  CHECK(bm.num_free_blocks() < 64);
  saved.check_invariants();
  saved.forget_all();
  CHECK(bm.num_free_blocks() == 64);
  CHECK(sched.num_free_state_slots() == 2);
}

TEST_CASE("scheduler: a full checkpoint pool evicts a conversation's superseded prompt end before any answer end") {
  BlockManager bm(64, 4, true);
  SchedulerConfig c = config(2, 64, 128);
  c.first_state_slot = 0;
  StateCheckpoints saved(2, 2, bm, 4);
  Scheduler sched(c, bm, &saved);
  auto finish_turn = [&](Sequence* seq) {
    sched.add(seq);
    while (!seq->is_finished()) run_step(sched, 40);
  };
  auto a = make_seq(1, 1, 10, 3, sched), b = make_seq(2, 101, 10, 3, sched);
  // a's prompt end, superseded by its answer end; b's prompt end takes its slot, and b's
  // answer end takes b's superseded prompt end's rather than a's answer end (the least
  // recently used).
  finish_turn(a.get());
  finish_turn(b.get());
  auto next_of = [&](const Sequence& prev, int64_t id) {
    std::vector<int32_t> t = prev.token_ids;
    t.push_back(7);
    auto seq = std::make_unique<Sequence>(id, t, prev.params);
    seq->max_tokens = 1;
    return seq;
  };
  auto a2 = next_of(*a, 3);
  finish_turn(a2.get());
  CHECK(a2->num_cached_tokens == a->num_tokens() - 1);
  saved.forget_all();
  CHECK(bm.num_free_blocks() == 64);
}

TEST_CASE("scheduler: abort in every state frees blocks and forgets the sequence") {
  BlockManager bm(8, 2, true);
  Scheduler sched(config(4, 4, 12), bm);
  auto a = make_seq(1, 1, 6, 4, sched), b = make_seq(2, 11, 3, 4, sched), c = make_seq(3, 21, 3, 4, sched);
  sched.add(a.get());
  sched.add(b.get());
  sched.add(c.get());

  SUBCASE("waiting") {
    sched.finish(c.get(), FinishReason::ABORT);
    CHECK(c->status == SeqStatus::FINISHED);
    CHECK(c->finish_reason == FinishReason::ABORT);
    CHECK(sched.waiting().size() == 2);
  }
  SUBCASE("running in the middle of its prefill") {
    run_step(sched, 5);  // a: 4 of 6 prompt tokens
    REQUIRE(a->status == SeqStatus::RUNNING);
    REQUIRE(a->num_computed_tokens == 4);
    sched.finish(a.get(), FinishReason::ABORT);
    CHECK(a->block_table.empty());
    CHECK(bm.num_free_blocks() == 8);
    CHECK(sched.running().empty());
  }
  SUBCASE("preempted") {
    BlockManager small(3, 2, true);
    Scheduler s2(config(4, 16, 6), small);
    auto x = make_seq(4, 1, 2, 4, s2), y = make_seq(5, 11, 2, 4, s2);
    s2.add(x.get());
    s2.add(y.get());
    run_step(s2, 5);  // x [0], y [1] ... both need a second block next
    run_step(s2, 5);
    REQUIRE(y->status == SeqStatus::PREEMPTED);
    s2.finish(y.get(), FinishReason::ABORT);
    CHECK(y->status == SeqStatus::FINISHED);
    CHECK(s2.waiting().empty());
    small.check_invariants();
  }
  SUBCASE("finished: a second finish is ignored") {
    sched.finish(b.get(), FinishReason::STOP);
    sched.finish(b.get(), FinishReason::ABORT);
    CHECK(b->finish_reason == FinishReason::STOP);
  }
  while (sched.has_work()) run_step(sched, 5);
  CHECK(bm.num_free_blocks() == 8);
  bm.check_invariants();
}

TEST_CASE("admission: prompt + max_tokens is checked against max_model_len, ids against the vocabulary") {
  Admission admission(100, 32);
  const std::vector<int32_t> ten(10, 7), full(32, 7), bad = {1, 100};
  SamplingParams p;
  CHECK(admission.check(ten, p) == 22);  // absent: the room left
  p.max_tokens = 22;
  CHECK(admission.check(ten, p) == 22);
  p.max_tokens = 23;
  CHECK_THROWS_WITH_AS(admission.check(ten, p),
                       doctest::Contains("prompt (10 tokens) plus max_tokens (23) is 33 tokens"), ContextLengthError);
  CHECK_THROWS_WITH_AS(admission.check(full, SamplingParams{}), doctest::Contains("32 tokens"), ContextLengthError);
  CHECK_THROWS_AS(admission.check({}, SamplingParams{}), InputError);
  CHECK_THROWS_WITH_AS(admission.check(bad, SamplingParams{}), doctest::Contains("outside the vocabulary"), InputError);
  // A prompt-only request (an embedding's) needs no room for output: it may fill the context.
  CHECK(admission.check(full, SamplingParams{}, /*prompt_only=*/true) == 1);
  const std::vector<int32_t> over(33, 7);
  CHECK_THROWS_WITH_AS(admission.check(over, SamplingParams{}, true), doctest::Contains("33 tokens, more than"),
                       ContextLengthError);
}

TEST_CASE("scheduler: configurations that could deadlock are refused") {
  BlockManager bm(8, 4, true);
  CHECK_THROWS_WITH_AS(Scheduler(config(16, 8, 32), bm), doctest::Contains("max_num_seqs"), InputError);
  CHECK_THROWS_WITH_AS(Scheduler(config(4, 16, 32, false), bm), doctest::Contains("chunked prefill"), InputError);
  CHECK_THROWS_WITH_AS(Scheduler(config(4, 64, 64), bm), doctest::Contains("KV cache holds 32 tokens"), InputError);
}
