// scheduler.cpp — step planning with token/sequence budgets, chunked prefill and
// preemption by recompute.
#include "engine/core/scheduler.h"

#include <algorithm>

#include "engine/core/speculator.h"
#include "engine/util/check.h"

namespace spark {

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks, StateCheckpoints* checkpoints)
    : config_(config), blocks_(blocks), checkpoints_(checkpoints) {
  auto need = [](bool ok, const std::string& msg) {
    if (!ok) throw InputError(msg);
  };
  need(config_.max_num_seqs >= 1, "engine.max_num_seqs must be >= 1, got " + std::to_string(config_.max_num_seqs));
  need(config_.max_num_batched_tokens >= config_.max_num_seqs,
       "engine.max_num_batched_tokens (" + std::to_string(config_.max_num_batched_tokens) +
           ") must be >= engine.max_num_seqs (" + std::to_string(config_.max_num_seqs) +
           ") so every running sequence can decode each step");
  need(config_.max_model_len >= 1, "max_model_len must be >= 1");
  SPARK_CHECK(!checkpoints_ || config_.first_state_slot >= 0, "state checkpoints without state slots");
  need(config_.enable_chunked_prefill || config_.max_num_batched_tokens >= config_.max_model_len,
       "engine.max_num_batched_tokens (" + std::to_string(config_.max_num_batched_tokens) +
           ") must be >= max_model_len (" + std::to_string(config_.max_model_len) +
           ") when chunked prefill is off, or a long prompt could never be scheduled");
  need(blocks_.num_blocks() * blocks_.block_size() >= config_.max_model_len,
       "the KV cache holds " + std::to_string(blocks_.num_blocks() * blocks_.block_size()) +
           " tokens, less than max_model_len (" + std::to_string(config_.max_model_len) +
           "); lower model.max_model_len or give the KV cache more memory");
  // With full-only blocks, one sequence's window and a whole step must fit the window blocks.
  const int64_t bs = blocks_.block_size();
  const int64_t one_window = (std::max<int64_t>(blocks_.window() - 1, 0) + bs - 1) / bs + 2 +
                             (config_.max_num_batched_tokens + bs - 1) / bs;
  need(blocks_.num_window_blocks() == blocks_.num_blocks() || blocks_.num_window_blocks() >= one_window,
       "the sliding-window layers hold " + std::to_string(blocks_.num_window_blocks()) + " KV blocks, fewer than the " +
           std::to_string(one_window) + " one sequence's window and a max_num_batched_tokens step need");
  if (config_.first_state_slot >= 0)  // the lowest slot is taken first
    for (int64_t i = config_.max_num_seqs - 1; i >= 0; --i)
      free_state_slots_.push_back(static_cast<int32_t>(config_.first_state_slot + i));
}

void Scheduler::add(Sequence* seq) {
  SPARK_CHECK(seq && seq->status == SeqStatus::WAITING && seq->block_table.empty(), "add takes a fresh sequence");
  // A prompt-only sequence (returns_hidden) writes no output token and may fill the context.
  SPARK_CHECK(seq->max_tokens >= 1 &&
                  seq->num_prompt_tokens + (seq->returns_hidden ? 0 : seq->max_tokens) <= config_.max_model_len,
              "max_tokens not resolved");
  waiting_.push_back(seq);
}

void Scheduler::take_state_slot(Sequence* seq) {
  if (config_.first_state_slot < 0) return;
  SPARK_CHECK(!free_state_slots_.empty() && seq->state_slot < 0, "more running sequences than state slots");
  seq->state_slot = free_state_slots_.back();
  free_state_slots_.pop_back();
}

void Scheduler::release_state_slot(Sequence* seq) {
  if (seq->state_slot < 0) return;
  free_state_slots_.push_back(seq->state_slot);
  seq->state_slot = -1;
}

void Scheduler::save_state(const Sequence& seq, bool shared) {
  if (!checkpoints_ || seq.state_slot < 0) return;
  // With drafts rejected, the state after the computed tokens is the snapshot's.
  checkpoints_->save(seq, seq.restore_state ? static_cast<int32_t>(seq.state_slot + config_.snapshot_offset) : seq.state_slot,
                     shared);
}

int64_t Scheduler::up_to_checkpoint(const Sequence& seq, int64_t computed, int64_t n) {
  return seq.checkpoint_at > computed ? std::min(n, seq.checkpoint_at - computed) : n;
}

void Scheduler::preempt(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  SPARK_CHECK(it != running_.end(), "preempting a sequence that is not running");
  running_.erase(it);
  save_state(*seq);  // it resumes from here, unless the cache needs the room first
  release_state_slot(seq);
  blocks_.free(*seq);
  seq->draft_tokens.clear();
  seq->num_computed_tokens = 0;
  seq->restore_state = false;  // recomputed from a checkpoint or position 0
  seq->status = SeqStatus::PREEMPTED;
  ++seq->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(seq);
}

ScheduledStep Scheduler::schedule() {
  ScheduledStep step;
  int64_t budget = config_.max_num_batched_tokens;
  auto plan = [&](Sequence* seq, int64_t n, int64_t drafts = 0) {
    step.entries.push_back({seq, n, -1, drafts});
    budget -= n;
  };
  auto unplan = [&](Sequence* seq) {
    auto it = std::find_if(step.entries.begin(), step.entries.end(), [seq](const StepEntry& e) { return e.seq == seq; });
    if (it == step.entries.end()) return;
    budget += it->num_new_tokens;
    step.entries.erase(it);
  };

  // Running sequences: decodes (one token each) before partial prefills, so a long
  // prompt being chunked never holds back the tokens of sequences already streaming.
  std::vector<Sequence*> order(running_);
  std::stable_partition(order.begin(), order.end(), [](Sequence* s) { return s->num_uncomputed_tokens() == 1; });
  for (Sequence* seq : order) {
    if (seq->status != SeqStatus::RUNNING) continue;  // preempted earlier in this loop
    if (budget == 0) break;
    int64_t remaining = seq->num_uncomputed_tokens();
    SPARK_CHECK(remaining >= 1, "a running sequence with nothing to compute");
    if (!seq->draft_tokens.empty()) {
      // Drafts take spare blocks only: one stays free per running sequence, so they
      // never cost anyone a preemption.
      const auto drafts = std::min<int64_t>(static_cast<int64_t>(seq->draft_tokens.size()), budget - 1);
      const bool spare = blocks_.num_free_window_blocks() > static_cast<int64_t>(running_.size());
      if (remaining == 1 && drafts > 0 && spare && blocks_.allocate(*seq, 1 + drafts)) {
        seq->draft_tokens.resize(static_cast<size_t>(drafts));
        plan(seq, 1 + drafts, drafts);
        continue;
      }
      seq->draft_tokens.clear();
    }
    int64_t n = up_to_checkpoint(*seq, seq->num_computed_tokens, std::min(remaining, budget));
    if (!config_.enable_chunked_prefill && n < remaining) continue;
    while (!blocks_.allocate(*seq, n)) {
      if (checkpoints_ && checkpoints_->evict_pinned()) continue;  // cache before anyone's blocks
      Sequence* victim = running_.back();  // the newest request loses its blocks
      unplan(victim);
      preempt(victim);
      step.preempted.push_back(victim);
      if (victim == seq) break;
    }
    if (seq->status == SeqStatus::RUNNING) plan(seq, n);
  }

  // Admission, first come first served; none while this step had to preempt.
  while (step.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    PrefixHit hit = blocks_.find_cached_prefix(*seq);
    const int32_t checkpoint = checkpoints_ ? checkpoints_->resume(*seq, hit) : -1;
    if (checkpoints_ && config_.enable_chunked_prefill) seq->checkpoint_at = checkpoints_->shared_prefix(*seq, hit.num_tokens);
    int64_t remaining = seq->num_tokens() - hit.num_tokens;
    int64_t n = std::min(remaining, budget);
    if (!config_.enable_chunked_prefill && n < remaining) break;
    n = up_to_checkpoint(*seq, hit.num_tokens, n);
    if (!blocks_.allocate(*seq, n, &hit)) {
      if (checkpoints_ && checkpoints_->evict_pinned()) continue;  // look again: the hit may have changed
      break;
    }
    waiting_.pop_front();
    seq->status = SeqStatus::RUNNING;
    running_.push_back(seq);
    take_state_slot(seq);
    if (checkpoint >= 0) checkpoints_->copy_state(checkpoint, seq->state_slot);
    plan(seq, n);
  }

  build_batch(step);
  // Copies recorded while planning run before this step writes; with no step they wait
  // for the next one (a cached destination must get its K/V before anyone reads it).
  if (!step.empty()) step.batch.block_copies = blocks_.take_copies();
  if (!step.empty() && checkpoints_) step.batch.state_copies = checkpoints_->take_copies();
  if (config_.snapshot_offset >= 0)
    for (const StepEntry& e : step.entries) {
      const auto slot = e.seq->state_slot, snapshot = static_cast<int32_t>(slot + config_.snapshot_offset);
      if (e.seq->restore_state) step.batch.state_copies.insert(step.batch.state_copies.end(), {snapshot, slot});
      else if (e.num_draft_tokens > 0) step.batch.state_copies.insert(step.batch.state_copies.end(), {slot, snapshot});
      e.seq->restore_state = false;
    }
  return step;
}

void Scheduler::build_batch(ScheduledStep& step) const {
  Batch& b = step.batch;
  const int64_t bs = blocks_.block_size();
  int64_t total = 0, max_blocks = 0;
  for (const StepEntry& e : step.entries) {
    total += e.num_new_tokens;
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(e.seq->block_table.size()));
  }
  b.token_ids.reserve(static_cast<size_t>(total));
  b.positions.reserve(static_cast<size_t>(total));
  b.slot_mapping.reserve(static_cast<size_t>(total));
  b.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  b.block_tables.assign(step.entries.size() * static_cast<size_t>(max_blocks), 0);
  b.query_start.push_back(0);
  for (size_t i = 0; i < step.entries.size(); ++i) {
    StepEntry& entry = step.entries[i];
    const Sequence& seq = *entry.seq;
    const int64_t start = seq.num_computed_tokens, end = start + entry.num_new_tokens;
    const int64_t known = seq.num_tokens() + entry.num_draft_tokens;  // drafts follow the tokens
    SPARK_CHECK(entry.num_draft_tokens == static_cast<int64_t>(entry.num_draft_tokens ? seq.draft_tokens.size() : 0) &&
                    end <= known && static_cast<int64_t>(seq.block_table.size()) * bs >= end,
                "plan exceeds blocks");
    if (config_.hidden_for_drafts && !seq.returns_hidden && seq.params.speculative && !seq.no_more_drafts) {
      entry.draft_hidden_row = static_cast<int32_t>(b.hidden_rows.size());
      for (int64_t r = 0; r < end - start; ++r) b.hidden_rows.push_back(static_cast<int32_t>(b.token_ids.size() + r));
    }
    for (int64_t pos = start; pos < end; ++pos) {
      b.token_ids.push_back(pos < seq.num_tokens() ? seq.token_ids[pos] : seq.draft_tokens[pos - seq.num_tokens()]);
      b.positions.push_back(static_cast<int32_t>(pos));
      b.slot_mapping.push_back(static_cast<int32_t>(seq.block_table[pos / bs] * bs + pos % bs));
    }
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(static_cast<int32_t>(end));
    std::copy(seq.block_table.begin(), seq.block_table.end(), b.block_tables.begin() + static_cast<std::ptrdiff_t>(i * max_blocks));
    if (config_.first_state_slot >= 0) b.state_slots.push_back(seq.state_slot);
    // Only the chunk that reaches the last known token yields a next token; with drafts,
    // the last token and every draft do.
    const auto last = static_cast<int32_t>(b.token_ids.size()) - 1;
    if (end == known && seq.returns_hidden) {
      SPARK_CHECK(!config_.whole_prompts || start == 0, "an encoder's prompt split across steps");
      entry.hidden_row = static_cast<int32_t>(b.hidden_rows.size());
      b.hidden_rows.push_back(config_.whole_prompts ? static_cast<int32_t>(b.token_ids.size() - (end - start)) : last);
    } else if (end == known) {
      entry.logits_row = static_cast<int32_t>(b.logits_rows.size());
      for (auto d = static_cast<int32_t>(entry.num_draft_tokens); d >= 0; --d) b.logits_rows.push_back(last - d);
    }
  }
}

std::vector<int64_t> Scheduler::update(const ScheduledStep& step, const std::vector<int32_t>& sampled) {
  SPARK_CHECK(sampled.size() == step.batch.logits_rows.size(), "one sampled token per logits row");
  std::vector<int64_t> appended(step.entries.size(), 0);
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const StepEntry& e = step.entries[i];
    Sequence* seq = e.seq;
    SPARK_CHECK(seq->status == SeqStatus::RUNNING, "a planned sequence left the running queue mid-step");
    if (e.logits_row < 0) {
      seq->num_computed_tokens += e.num_new_tokens;
      blocks_.cache_full_blocks(*seq);
      if (seq->num_computed_tokens == seq->checkpoint_at || seq->num_computed_tokens == seq->num_prompt_tokens)
        save_state(*seq, seq->num_computed_tokens == seq->checkpoint_at);
      continue;
    }
    const int32_t* samples = sampled.data() + e.logits_row;
    const size_t accepted = accepted_drafts(seq->draft_tokens, samples);
    // The rows of the rejected drafts computed nothing that stays. A recurrent state took
    // them in, though: it goes back to its snapshot, and the step's tokens are computed
    // again (with the accepted drafts and the new token, as one chunk).
    if (config_.snapshot_offset >= 0 && static_cast<int64_t>(accepted) < e.num_draft_tokens) seq->restore_state = true;
    else seq->num_computed_tokens += e.num_new_tokens - e.num_draft_tokens + static_cast<int64_t>(accepted);
    seq->draft_tokens.clear();
    blocks_.trim(*seq);
    for (size_t j = 0; j <= accepted; ++j) seq->append_token(samples[j]);
    blocks_.cache_full_blocks(*seq);
    if (seq->num_computed_tokens == seq->num_prompt_tokens) save_state(*seq);  // the end of its prompt
    appended[i] = static_cast<int64_t>(accepted) + 1;
  }
  return appended;
}

void Scheduler::finish(Sequence* seq, FinishReason reason) {
  if (seq->status == SeqStatus::FINISHED) return;
  if (auto it = std::find(running_.begin(), running_.end(), seq); it != running_.end()) {
    running_.erase(it);
  } else if (auto w = std::find(waiting_.begin(), waiting_.end(), seq); w != waiting_.end()) {
    waiting_.erase(w);
  } else {
    return;
  }
  // The end of an answer: the next turn of the conversation starts with these tokens.
  // (Not after a failure, whose state may be anything, nor a cancel.)
  if (reason == FinishReason::STOP || reason == FinishReason::LENGTH) save_state(*seq);
  release_state_slot(seq);
  blocks_.free(*seq);
  seq->status = SeqStatus::FINISHED;
  seq->finish_reason = reason;
}

}  // namespace spark
