// scheduler.h — continuous batching: which sequences run this step, with how many
// tokens each, flattened into a Batch for the backend.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/core/block_manager.h"
#include "engine/core/sequence.h"
#include "engine/core/state_checkpoints.h"
#include "engine/step/step.h"

namespace spark {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_model_len = 4096;
  bool enable_chunked_prefill = true;
  // A model with recurrent layers: each running sequence holds one of the state slots
  // [first_state_slot, first_state_slot + max_num_seqs) (Batch::state_slots); -1: none.
  int64_t first_state_slot = -1;
  // With drafts on a model with recurrent layers: each state slot's snapshot is the slot
  // this far above it (Batch::state_copies); -1: none.
  int64_t snapshot_offset = -1;
  // Drafts from an MTP head or Gemma 4's assistant, which read the model's final hidden
  // states: each row of a sequence that may draft is a hidden row (StepEntry::draft_hidden_row).
  bool hidden_for_drafts = false;
  // An encoder (ModelSpec::encoder): each prompt runs whole in one step, since every token
  // attends to all of them (max_model_len must not exceed max_num_batched_tokens), and the
  // hidden state a sequence returns is its first token's (CLS pooling).
  bool whole_prompts = false;
};

// One sequence's part of a step: num_new_tokens rows of the batch, in entry order; when
// logits_row >= 0, its last row's logits are that row of the output and a token is
// sampled for it. A sequence verifying drafts has num_draft_tokens of its rows on
// seq->draft_tokens, and its last 1 + num_draft_tokens rows each get a logits row
// (consecutive, from logits_row). A sequence that returns its hidden state instead
// (Sequence::returns_hidden) gets hidden_row >= 0 on the chunk that ends its prompt:
// its last row (first, with whole_prompts) is batch.hidden_rows[hidden_row]. With SchedulerConfig::hidden_for_drafts,
// a sequence that may draft gets draft_hidden_row >= 0: its rows are the hidden rows from
// there on, in order.
struct StepEntry {
  Sequence* seq = nullptr;
  int64_t num_new_tokens = 0;
  int32_t logits_row = -1;
  int64_t num_draft_tokens = 0;
  int32_t hidden_row = -1;
  int32_t draft_hidden_row = -1;
};

struct ScheduledStep {
  Batch batch;
  std::vector<StepEntry> entries;
  std::vector<Sequence*> preempted;  // sequences preempted while planning this step

  bool empty() const { return entries.empty(); }
};

// Sequences are owned by the caller; the scheduler keeps pointers until they finish or
// are aborted. Not thread-safe: one engine thread owns it.
//
// With `checkpoints` (a model with recurrent layers and prefix caching), a waiting
// sequence resumes from the longest checkpoint its tokens start with, and checkpoints are
// saved at the end of each prompt, of each answer (finished by a stop or its length), at
// a preemption, and where a prompt leaves an earlier checkpoint's tokens: its prefill
// then stops there for one step (Sequence::checkpoint_at).
class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockManager& blocks, StateCheckpoints* checkpoints = nullptr);

  // Queues a sequence (status WAITING) at the back of the waiting queue.
  void add(Sequence* seq);

  // Plans one step: decode tokens of running sequences first, then partial prefills,
  // then admission of waiting sequences (chunked when enabled), within the token and
  // sequence budgets. When blocks run out, the newest running sequence is preempted
  // (recompute) and goes to the front of the waiting queue. A decoding sequence's
  // draft_tokens become extra rows when blocks (with one to spare per running sequence)
  // and budget allow; otherwise they are dropped.
  ScheduledStep schedule();

  // After the backend ran `step`: advances computed tokens, registers full blocks in the
  // prefix cache and appends sampled[row] to every entry with a logits row. An entry
  // verifying drafts appends its accepted drafts and the sample after them
  // (accepted_drafts, engine/core/speculator.h), and the KV of the rejected ones is
  // rolled back. Returns the tokens appended per entry.
  std::vector<int64_t> update(const ScheduledStep& step, const std::vector<int32_t>& sampled);

  // Ends a running or waiting sequence (finished, aborted or failed): frees its blocks
  // and forgets it. A sequence the scheduler does not hold is ignored.
  void finish(Sequence* seq, FinishReason reason);

  const std::deque<Sequence*>& waiting() const { return waiting_; }
  const std::vector<Sequence*>& running() const { return running_; }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  const SchedulerConfig& config() const { return config_; }
  // Set once a drafter that reads the model's hidden states is attached (an MTP head,
  // Gemma 4's assistant), before the first step.
  void set_hidden_for_drafts(bool on) { config_.hidden_for_drafts = on; }
  BlockManager& blocks() { return blocks_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t num_free_state_slots() const { return static_cast<int64_t>(free_state_slots_.size()); }

 private:
  void preempt(Sequence* seq);
  void build_batch(ScheduledStep& step) const;
  // A running sequence's state slot: taken when it starts running, given back when it
  // stops (preempted: it starts again from position 0, and a fresh state).
  void take_state_slot(Sequence* seq);
  void release_state_slot(Sequence* seq);
  // Saves seq's state after its computed tokens (a checkpoint), from the slot that holds it.
  void save_state(const Sequence& seq, bool shared = false);
  // n new tokens for seq after its first `computed`, cut to end at its checkpoint_at.
  static int64_t up_to_checkpoint(const Sequence& seq, int64_t computed, int64_t n);

  SchedulerConfig config_;
  BlockManager& blocks_;
  StateCheckpoints* checkpoints_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order: the back is the newest
  int64_t num_preemptions_ = 0;
  std::vector<int32_t> free_state_slots_;
};

}  // namespace spark
