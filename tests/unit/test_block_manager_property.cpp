// test_block_manager_property.cpp — randomized operations (add, step, finish, abort,
// preemption, prefix hits) checked for leaked or double-freed KV blocks after each one.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "engine/core/admission.h"
#include "engine/core/block_manager.h"
#include "engine/core/scheduler.h"

using namespace spark;

namespace {

// Every block's ref count must equal the number of live block tables naming it, and
// every unreferenced block must be free: nothing leaked, nothing freed twice.
void check_accounting(const BlockManager& bm, const std::vector<std::unique_ptr<Sequence>>& live) {
  bm.check_invariants();
  std::vector<int32_t> refs(static_cast<size_t>(bm.num_blocks()), 0);
  for (const auto& seq : live)
    for (int32_t id : seq->block_table) ++refs[static_cast<size_t>(id)];
  int64_t used = 0;
  for (int32_t id = 0; id < bm.num_blocks(); ++id) {
    REQUIRE(bm.ref_count(id) == refs[static_cast<size_t>(id)]);
    used += refs[static_cast<size_t>(id)] > 0 ? 1 : 0;
  }
  REQUIRE(bm.num_used_blocks() == used);
}

void run_property(uint64_t seed, bool chunked, int64_t num_ops) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };

  BlockManager bm(12, 4, true);
  SchedulerConfig cfg;
  cfg.max_num_seqs = 6;
  cfg.max_num_batched_tokens = chunked ? 12 : 40;
  cfg.max_model_len = 40;
  cfg.enable_chunked_prefill = chunked;
  Scheduler sched(cfg, bm);

  // Prompts share a few prefixes so that prefix hits happen often.
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(4 + pick(10)));
    for (auto& t : p) t = static_cast<int32_t>(pick(50));
    prefixes.push_back(p);
  }

  std::vector<std::unique_ptr<Sequence>> live;
  int64_t next_id = 1, steps = 0, finished = 0, aborted = 0;
  auto forget = [&](Sequence* s) {
    live.erase(std::find_if(live.begin(), live.end(), [&](const auto& p) { return p.get() == s; }));
  };

  for (int64_t op = 0; op < num_ops; ++op) {
    const int64_t kind = pick(10);
    if (kind < 3 && live.size() < 16) {  // add
      std::vector<int32_t> prompt = prefixes[static_cast<size_t>(pick(3))];
      const int64_t extra = pick(8);
      for (int64_t i = 0; i < extra; ++i) prompt.push_back(static_cast<int32_t>(pick(50)));
      SamplingParams params;
      params.max_tokens = 1 + pick(16);
      auto seq = std::make_unique<Sequence>(next_id++, prompt, params);
      seq->max_tokens = Admission(1 << 20, cfg.max_model_len).check(prompt, params);
      sched.add(seq.get());
      live.push_back(std::move(seq));
    } else if (kind < 8) {  // step: schedule, "run", sample, finish what hit max_tokens
      ScheduledStep step = sched.schedule();
      REQUIRE(step.batch.num_tokens() <= cfg.max_num_batched_tokens);
      REQUIRE(step.batch.num_seqs() <= cfg.max_num_seqs);
      std::vector<int32_t> sampled(step.batch.logits_rows.size());
      for (auto& t : sampled) t = static_cast<int32_t>(pick(50));
      sched.update(step, sampled);
      ++steps;
      for (const StepEntry& e : step.entries) {
        Sequence* s = e.seq;
        if (e.logits_row >= 0 && s->num_output_tokens() >= s->max_tokens) {
          sched.finish(s, FinishReason::LENGTH);
          forget(s);
          ++finished;
        }
      }
    } else if (!live.empty()) {  // abort any live sequence, whatever its state
      Sequence* s = live[static_cast<size_t>(pick(static_cast<int64_t>(live.size())))].get();
      sched.finish(s, FinishReason::ABORT);
      REQUIRE(s->block_table.empty());
      forget(s);
      ++aborted;
    }
    check_accounting(bm, live);
  }
  // Drain: everything left must finish (no deadlock) and return every block.
  for (int64_t guard = 0; !live.empty(); ++guard) {
    REQUIRE(guard < 10000);
    ScheduledStep step = sched.schedule();
    REQUIRE_FALSE(step.empty());
    std::vector<int32_t> sampled(step.batch.logits_rows.size(), 7);
    sched.update(step, sampled);
    for (const StepEntry& e : step.entries) {
      Sequence* s = e.seq;
      if (e.logits_row >= 0 && s->num_output_tokens() >= s->max_tokens) {
        sched.finish(s, FinishReason::LENGTH);
        forget(s);
      }
    }
    check_accounting(bm, live);
  }
  CHECK(bm.num_free_blocks() == bm.num_blocks());
  CHECK(steps > num_ops / 3);
  CHECK(finished > 100);
  CHECK(aborted > 100);
  CHECK(sched.num_preemptions() > 10);
  CHECK(bm.prefix_cache_hits() > 100);
}

}  // namespace

TEST_CASE("block manager property: 12,000 random operations with chunked prefill") {
  run_property(12345, true, 12000);
}

TEST_CASE("block manager property: 12,000 random operations without chunked prefill") {
  run_property(777, false, 12000);
}
