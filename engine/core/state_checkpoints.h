// state_checkpoints.h — saved recurrent states, so that a prompt continuing an earlier one
// (the next turn of a conversation, a shared system prompt, a preempted sequence) resumes
// at the exact token where that state was saved instead of from position 0.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/core/block_manager.h"
#include "engine/core/sequence.h"

namespace spark {

// A model with recurrent layers cannot resume a prompt from cached K/V blocks alone: it
// needs the recurrent state after the cached tokens as well. A checkpoint is a state slot
// holding the state after the first num_tokens tokens of some sequence, plus, when that
// count is not a whole number of blocks, the K/V block holding its last partial block
// (pinned, so it outlives the sequence; a resuming sequence gets a copy of it). The full
// blocks before it are looked up in the prefix cache, which evicts them as usual; a
// checkpoint whose blocks are gone is simply not found.
//
// The scheduler saves one at the end of each prompt, at the end of each answer, when a
// sequence is preempted, and where a prompt leaves the tokens of an earlier checkpoint (a
// shared system prompt: the next prompt that shares it resumes there). Saving into a full
// pool evicts the least recently used checkpoint, taking first those superseded: a
// checkpoint whose tokens begin a later one's, unless it marks where prompts part (a
// conversation's next turn continues its latest checkpoint; the earlier ones stay while
// there is room, for an edited message or a template that renders an answer differently,
// and a hit makes one current again).
//
// The state moves between slots by copies the next step runs before anything else
// (Batch::state_copies), in the order they were queued: a save runs before a resume from
// it, and a resume before its slot is saved into again.
class StateCheckpoints {
 public:
  // Slots [first_slot, first_slot + num_slots) of the backend's state slots; a checkpoint
  // covers at least min_tokens tokens (shorter prompts cost little to compute again).
  StateCheckpoints(int64_t first_slot, int64_t num_slots, BlockManager& blocks, int64_t min_tokens);

  // At admission, with `hit` from blocks.find_cached_prefix(seq): the longest checkpoint
  // whose tokens start seq's, leave at least one token to compute, and whose full blocks
  // `hit` holds. Cuts `hit` to it (its full blocks and the tail block to copy) and returns
  // its slot, to be copied into the sequence's own (copy_state); -1 and an empty hit when
  // there is none.
  int32_t resume(const Sequence& seq, PrefixHit& hit);

  // How many leading tokens seq shares with the longest checkpoint it starts like, when
  // that is more than min_tokens beyond `from` and short of seq's last token: where a
  // checkpoint would let later prompts that share those tokens resume. 0 otherwise.
  int64_t shared_prefix(const Sequence& seq, int64_t from) const;

  // Saves the state after seq's computed tokens, held in `slot` (seq still holds its
  // blocks); `shared`: where its prompt parts from an earlier one (shared_prefix). Fewer
  // than min_tokens tokens: nothing. The same tokens as a checkpoint already kept: that one
  // becomes the most recently used instead.
  void save(const Sequence& seq, int32_t slot, bool shared = false);

  // Queues a copy of one slot's state into another (a resume: checkpoint -> sequence).
  void copy_state(int32_t from, int32_t to);

  // Evicts the least recently used checkpoint whose tail block only checkpoints hold (the
  // block goes back once the last of them is evicted). False when there is none.
  bool evict_pinned();

  // Drops every checkpoint (the states they named are gone, e.g. with a peer's layers).
  void forget_all();

  // The queued (source, destination) copies, in order; taking them clears them.
  std::vector<int32_t> take_copies();

  int64_t size() const;  // checkpoints kept
  int64_t capacity() const { return static_cast<int64_t>(slots_.size()); }
  // Blocks pinned by checkpoints alone: cache, given back on demand (evict_pinned).
  int64_t evictable_blocks() const;
  std::vector<int32_t> tail_blocks() const;  // one entry per checkpoint's pin

  // Aborts (SPARK_CHECK) if a checkpoint's pinned block is not referenced.
  void check_invariants() const;

 private:
  struct Checkpoint {
    bool used = false;
    std::vector<int32_t> tokens;         // the state follows exactly these
    std::vector<uint64_t> block_hashes;  // the prefix cache's chained hashes of its full blocks
    int32_t tail_block = -1;             // holds tokens [full blocks, tokens.size()); pinned
    uint64_t last_used = 0;
    bool shared = false;                 // where prompts part: never superseded
    bool superseded = false;             // evicted before the others
  };

  int32_t slot_of(size_t index) const { return static_cast<int32_t>(first_slot_ + static_cast<int64_t>(index)); }
  // c's tokens begin seq's first `limit` tokens (and are fewer)
  bool starts(const Checkpoint& c, const Sequence& seq, int64_t limit) const;
  int64_t pins(int32_t block) const;  // checkpoints holding this tail block
  void evict(Checkpoint& c);

  int64_t first_slot_;
  BlockManager& blocks_;
  int64_t min_tokens_;
  std::vector<Checkpoint> slots_;
  std::vector<int32_t> copies_;
  uint64_t clock_ = 0;
};

}  // namespace spark
