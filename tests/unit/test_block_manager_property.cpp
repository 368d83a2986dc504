// test_block_manager_property.cpp — randomized operations (add, step, finish, abort,
// preemption, prefix hits, speculative drafts rolled back, blocks leaving a sliding
// window, recurrent states restored from their snapshots, resumed from checkpoints)
// checked for leaked or double-freed KV blocks and state slots after each one.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "engine/core/admission.h"
#include "engine/core/block_manager.h"
#include "engine/core/scheduler.h"
#include "engine/core/state_checkpoints.h"

using namespace spark;

namespace {

// Every block's ref count must equal the number of live block tables (and checkpoints)
// naming it, and every unreferenced block must be free: nothing leaked, nothing freed twice.
void check_accounting(const BlockManager& bm, const std::vector<std::unique_ptr<Sequence>>& live,
                      const StateCheckpoints* checkpoints) {
  bm.check_invariants();
  std::vector<int32_t> refs(static_cast<size_t>(bm.num_blocks()), 0);
  for (const auto& seq : live)
    for (int32_t id : seq->block_table) ++refs[static_cast<size_t>(id)];
  if (checkpoints) {
    checkpoints->check_invariants();
    for (int32_t id : checkpoints->tail_blocks()) ++refs[static_cast<size_t>(id)];
  }
  int64_t used = 0;
  for (int32_t id = 0; id < bm.num_blocks(); ++id) {
    REQUIRE(bm.ref_count(id) == refs[static_cast<size_t>(id)]);
    used += refs[static_cast<size_t>(id)] > 0 ? 1 : 0;
  }
  REQUIRE(bm.num_used_blocks() == used);
}

// The KV cache as token ids per slot, written by each step's rows: every computed token
// of a live sequence must read back as itself through its block table (a rejected
// draft's KV counted as computed, or a prefix hit over it, reads back wrong). `slots`
// are the full-attention layers' (every block; a step's block copies run first),
// `window_slots` the sliding layers' (window blocks only): the tokens the next query's
// window reaches must read back there too.
struct SlotTokens {
  std::vector<int32_t> slots, window_slots;
  int64_t block_size = 0, window = 0;
  void write(const Batch& b) {
    for (size_t i = 0; i < b.block_copies.size(); i += 2)
      for (int64_t j = 0; j < block_size; ++j)
        slots.at(static_cast<size_t>(b.block_copies[i + 1] * block_size + j)) =
            slots.at(static_cast<size_t>(b.block_copies[i] * block_size + j));
    for (int32_t t = 0; t < b.num_tokens(); ++t) {
      slots.at(static_cast<size_t>(b.slot_mapping[t])) = b.token_ids[t];
      window_slots.at(static_cast<size_t>(b.slot_mapping[t])) = b.token_ids[t];  // new tokens take window blocks
    }
  }
  void check(const Sequence& s) const {
    REQUIRE(static_cast<int64_t>(s.block_table.size()) * block_size >= s.num_computed_tokens);
    for (int64_t p = 0; p < s.num_computed_tokens; ++p) {
      const int64_t slot = s.block_table[static_cast<size_t>(p / block_size)] * block_size + p % block_size;
      REQUIRE(slots[static_cast<size_t>(slot)] == s.token_ids[static_cast<size_t>(p)]);
      if (window > 0 && p > s.num_computed_tokens - window) {
        REQUIRE(slot < static_cast<int64_t>(window_slots.size()));
        REQUIRE(window_slots[static_cast<size_t>(slot)] == s.token_ids[static_cast<size_t>(p)]);
      }
    }
  }
};

// Sizes for a run: 12 blocks in every layer, or more of which some hold the sliding layers.
struct Cache {
  int64_t num_blocks = 12;
  SlidingKv sliding;
};

// A hybrid's recurrent states as the tokens each state slot has taken in: a step's state
// copies run first, a sequence whose rows start at position 0 starts from nothing, and every
// row adds its token. A running sequence's state must hold exactly its computed tokens (or,
// with a restore pending, its snapshot must).
struct SlotStates {
  std::vector<std::vector<int32_t>> taken;
  int64_t snapshot_offset = 0;
  void write(const Batch& b) {
    for (size_t i = 0; i < b.state_copies.size(); i += 2)
      taken.at(static_cast<size_t>(b.state_copies[i + 1])) = taken.at(static_cast<size_t>(b.state_copies[i]));
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      auto& state = taken.at(static_cast<size_t>(b.state_slots.at(static_cast<size_t>(s))));
      if (b.positions[static_cast<size_t>(b.query_start[static_cast<size_t>(s)])] == 0) state.clear();
      for (int32_t t = b.query_start[static_cast<size_t>(s)]; t < b.query_start[static_cast<size_t>(s) + 1]; ++t)
        state.push_back(b.token_ids[static_cast<size_t>(t)]);
    }
  }
  void check(const Sequence& s) const {
    const int32_t slot = s.restore_state ? s.state_slot + static_cast<int32_t>(snapshot_offset) : s.state_slot;
    const std::vector<int32_t> computed(s.token_ids.begin(), s.token_ids.begin() + s.num_computed_tokens);
    REQUIRE(taken.at(static_cast<size_t>(slot)) == computed);
  }
};

// speculative: before each step a decoding sequence may get drafts, which the "model"
// accepts in part (its samples follow the drafts for a random length, then differ).
// recurrent: a hybrid's scheduler (state slots with snapshots); with `checkpoints` > 0,
// that many state checkpoints and prefix caching, otherwise no prefix caching.
void run_property(uint64_t seed, bool chunked, int64_t num_ops, bool speculative = false, Cache cache = {},
                  bool recurrent = false, int64_t checkpoints = 0) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };

  BlockManager bm(cache.num_blocks, 4, !recurrent || checkpoints > 0, cache.sliding);
  SchedulerConfig cfg;
  cfg.max_num_seqs = 6;
  cfg.max_num_batched_tokens = chunked ? 12 : 40;
  cfg.max_model_len = 40;
  cfg.enable_chunked_prefill = chunked;
  if (recurrent) cfg.first_state_slot = 0, cfg.snapshot_offset = cfg.max_num_seqs;
  const int64_t first_checkpoint = 2 * cfg.max_num_seqs;
  std::unique_ptr<StateCheckpoints> saved;
  if (checkpoints > 0) saved = std::make_unique<StateCheckpoints>(first_checkpoint, checkpoints, bm, bm.block_size());
  Scheduler sched(cfg, bm, saved.get());
  SlotStates states{std::vector<std::vector<int32_t>>(static_cast<size_t>(first_checkpoint + checkpoints)), cfg.max_num_seqs};
  int64_t restores = 0, resumes = 0;

  // Prompts share a few prefixes so that prefix hits happen often.
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(4 + pick(10)));
    for (auto& t : p) t = static_cast<int32_t>(pick(50));
    prefixes.push_back(p);
  }

  std::vector<std::unique_ptr<Sequence>> live;
  std::vector<std::vector<int32_t>> turns(4);  // finished sequences' tokens, when short enough to go on
  int64_t next_id = 1, steps = 0, finished = 0, aborted = 0, drafted = 0, rejected = 0;
  SlotTokens kv{std::vector<int32_t>(static_cast<size_t>(bm.num_blocks() * bm.block_size()), -1),
                std::vector<int32_t>(static_cast<size_t>(bm.num_window_blocks() * bm.block_size()), -1), bm.block_size(),
                bm.window()};
  int64_t copied = 0;
  auto propose = [&] {
    if (!speculative) return;
    for (Sequence* s : sched.running()) {
      s->draft_tokens.clear();
      const int64_t room = s->max_tokens - s->num_output_tokens() - 1;
      if (s->num_uncomputed_tokens() != 1 || room <= 0) continue;
      const int64_t d = std::min(room, pick(5));
      for (int64_t i = 0; i < d; ++i) s->draft_tokens.push_back(static_cast<int32_t>(pick(50)));
    }
  };
  // Samples for a step: each draft group follows its drafts for a random prefix, then
  // differs, so some drafts are accepted and the rest rolled back.
  auto sample = [&](const ScheduledStep& step) {
    std::vector<int32_t> sampled(step.batch.logits_rows.size());
    for (auto& t : sampled) t = static_cast<int32_t>(pick(50));
    for (const StepEntry& e : step.entries) {
      if (e.num_draft_tokens == 0) continue;
      const int64_t keep = pick(e.num_draft_tokens + 1);
      for (int64_t i = 0; i < e.num_draft_tokens; ++i)
        sampled[static_cast<size_t>(e.logits_row + i)] =
            i < keep ? e.seq->draft_tokens[static_cast<size_t>(i)] : 50 + static_cast<int32_t>(pick(10));
      drafted += e.num_draft_tokens;
      rejected += e.num_draft_tokens - keep;
    }
    return sampled;
  };
  auto check_live = [&] {
    check_accounting(bm, live, saved.get());
    std::vector<int32_t> slots;
    for (const auto& s : live) {
      if (s->status != SeqStatus::RUNNING) continue;
      kv.check(*s);
      if (recurrent) {
        states.check(*s);
        slots.push_back(s->state_slot);
      }
      // No block held past the computed tokens: rejected drafts' blocks went back.
      REQUIRE(static_cast<int64_t>(s->block_table.size()) == (s->num_computed_tokens + bm.block_size() - 1) / bm.block_size());
      REQUIRE(s->draft_tokens.empty());
    }
    // One distinct slot per running sequence, the rest free.
    std::sort(slots.begin(), slots.end());
    REQUIRE(std::adjacent_find(slots.begin(), slots.end()) == slots.end());
    if (recurrent) REQUIRE(sched.num_free_state_slots() + static_cast<int64_t>(slots.size()) == cfg.max_num_seqs);
  };
  auto forget = [&](Sequence* s) {
    live.erase(std::find_if(live.begin(), live.end(), [&](const auto& p) { return p.get() == s; }));
  };

  for (int64_t op = 0; op < num_ops; ++op) {
    const int64_t kind = pick(10);
    if (kind < 3 && live.size() < 16) {  // add
      std::vector<int32_t> prompt = prefixes[static_cast<size_t>(pick(3))];
      // Or the next turn of a finished conversation: its prompt and answer, and more.
      if (!turns.empty() && pick(2) == 0) prompt = turns[static_cast<size_t>(pick(static_cast<int64_t>(turns.size())))];
      const int64_t extra = 1 + pick(8);
      for (int64_t i = 0; i < extra; ++i) prompt.push_back(static_cast<int32_t>(pick(50)));
      SamplingParams params;
      params.max_tokens = 1 + pick(std::min<int64_t>(16, cfg.max_model_len - static_cast<int64_t>(prompt.size())));
      auto seq = std::make_unique<Sequence>(next_id++, prompt, params);
      seq->max_tokens = Admission(1 << 20, cfg.max_model_len).check(prompt, params);
      sched.add(seq.get());
      live.push_back(std::move(seq));
    } else if (kind < 8) {  // step: schedule, "run", sample, finish what hit max_tokens
      propose();
      ScheduledStep step = sched.schedule();
      REQUIRE(step.batch.num_tokens() <= cfg.max_num_batched_tokens);
      REQUIRE(step.batch.num_seqs() <= cfg.max_num_seqs);
      copied += static_cast<int64_t>(step.batch.block_copies.size()) / 2;
      kv.write(step.batch);
      if (recurrent) states.write(step.batch);
      for (size_t i = 0; i < step.batch.state_copies.size(); i += 2) {
        restores += step.batch.state_copies[i] >= cfg.snapshot_offset && step.batch.state_copies[i] < first_checkpoint;
        resumes += step.batch.state_copies[i] >= first_checkpoint;
      }
      sched.update(step, sample(step));
      ++steps;
      for (const StepEntry& e : step.entries) {
        Sequence* s = e.seq;
        // A stop token may come right after rejected drafts (its state is the snapshot's).
        const bool stop = s->restore_state && pick(2) == 0;
        if (e.logits_row >= 0 && (s->num_output_tokens() >= s->max_tokens || stop)) {
          sched.finish(s, stop ? FinishReason::STOP : FinishReason::LENGTH);
          if (s->num_tokens() + 9 < cfg.max_model_len) turns[static_cast<size_t>(finished % 4)] = s->token_ids;
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
    check_live();
  }
  // Drain: everything left must finish (no deadlock) and return every block.
  for (int64_t guard = 0; !live.empty(); ++guard) {
    REQUIRE(guard < 10000);
    propose();
    ScheduledStep step = sched.schedule();
    REQUIRE_FALSE(step.empty());
    kv.write(step.batch);
    if (recurrent) states.write(step.batch);
    sched.update(step, sample(step));
    for (const StepEntry& e : step.entries) {
      Sequence* s = e.seq;
      if (e.logits_row >= 0 && s->num_output_tokens() >= s->max_tokens) {
        sched.finish(s, FinishReason::LENGTH);
        forget(s);
      }
    }
    check_live();
  }
  if (saved) {  // checkpoints hold their tail blocks until evicted
    CHECK(resumes > 100);
    CHECK(bm.prefix_cache_hits() > 1000);
    CHECK(saved->size() == checkpoints);
    saved->forget_all();
  }
  CHECK(bm.num_free_blocks() == bm.num_blocks());
  if (recurrent) {
    CHECK(sched.num_free_state_slots() == cfg.max_num_seqs);
    if (speculative) CHECK(restores > 300);
  }
  if (speculative) {
    CHECK(next_id > 1000);  // requests
    CHECK(drafted > 1000);
    CHECK(rejected > 500);
  }
  CHECK(steps > num_ops / 3);
  CHECK(finished > 100);
  CHECK(aborted > 100);
  CHECK(sched.num_preemptions() > 10);
  if (!recurrent || checkpoints > 0) CHECK(bm.prefix_cache_hits() > 100);
  if (bm.num_window_blocks() < bm.num_blocks()) CHECK(copied > 500);
}

// 22 blocks of 4 tokens, the first 14 in the sliding layers too; a window of 6 tokens.
constexpr Cache kSliding{22, {6, 14}};

}  // namespace

TEST_CASE("block manager property: 12,000 random operations with chunked prefill") {
  run_property(12345, true, 12000);
}

TEST_CASE("block manager property: 12,000 random operations without chunked prefill") {
  run_property(777, false, 12000);
}

TEST_CASE("block manager property: 12,000 random operations with speculative drafts rolled back") {
  run_property(4242, true, 12000, true);
}

TEST_CASE("block manager property: sliding-window blocks move out of the window, chunked prefill") {
  run_property(2024, true, 12000, false, kSliding);
}

TEST_CASE("block manager property: sliding-window blocks move out of the window, whole prompts") {
  run_property(99, false, 12000, false, kSliding);
}

TEST_CASE("block manager property: sliding-window blocks move out of the window, drafts rolled back") {
  run_property(31337, true, 12000, true, kSliding);
}

TEST_CASE("block manager property: a hybrid's states, drafts rolled back from their snapshots, preemption") {
  run_property(8080, true, 12000, true, {}, true);
}

TEST_CASE("block manager property: a hybrid resumed from state checkpoints (evicted, pinning blocks), drafts, preemption") {
  run_property(6060, true, 12000, true, {}, true, 5);
}

TEST_CASE("block manager property: a hybrid resumed from state checkpoints, whole prompts") {
  run_property(5150, false, 12000, false, {}, true, 3);
}
