// block_manager.h — the paged KV cache's bookkeeping: block ids, reference counts, free
// queues in eviction order, automatic prefix caching of full blocks, and the blocks that
// sliding-window layers no longer need.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/core/sequence.h"

namespace spark {

// Blocks of a sequence's prompt found in the prefix cache, not yet referenced. With
// num_tokens beyond the full blocks (a recurrent state's checkpoint,
// engine/core/state_checkpoints.h), tail_block holds the rest: the sequence gets a fresh
// block with a copy of its K/V.
struct PrefixHit {
  std::vector<int32_t> blocks;
  int64_t num_tokens = 0;
  int32_t tail_block = -1;
};

// Sliding-window layers (gpt-oss) read only the last `window` tokens, so only the first
// num_window_blocks block ids have storage in those layers ("window blocks"); the ids
// after them have storage in the full-attention layers only ("full-only blocks"). New
// tokens always go to window blocks. Once a block lies wholly behind its sequence's
// window, the sequence's table entry moves to a full-only block: an existing cached copy
// of the same tokens, or a fresh one its full-attention K/V is copied to (take_copies
// hands those copies to the next step, which runs them before it writes anything). The
// window block it left keeps its prefix hash while it sits free, so a later prefix hit
// ending near it still finds the sliding layers' K/V its window needs. A model without
// sliding layers has num_window_blocks == num_blocks and never moves a block.
struct SlidingKv {
  int64_t window = 0;             // tokens a sliding layer sees, the newest included; 0: none
  int64_t num_window_blocks = 0;  // ids [0, this) hold every layer; 0: every block does
};

// Every block is either referenced by sequences (ref_count > 0) or sits in the free
// queue. A free block may still hold a cached full block (its hash stays registered)
// until allocation takes it from the head of the queue: that is the LRU eviction.
//
// Window and full-only blocks have a free queue each. Free queue order: a freed block that holds no cached content goes to the head (it is
// worth nothing, reuse it first); a freed cached block goes to the tail. A sequence's
// blocks are released last block first, so its deep blocks are evicted before the
// shared prefix blocks they hang from.
class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching, SlidingKv sliding = {});

  // The longest run of cached full blocks at the start of seq's tokens, leaving at least
  // one token to compute (its logits are needed), and whose last window - 1 tokens are in
  // window blocks (the first computed token's window reads them in sliding layers).
  // Extends seq.block_hashes.
  PrefixHit find_cached_prefix(Sequence& seq);

  // Makes room for num_new_tokens tokens after the computed ones. For a sequence without
  // blocks, `hit` (from find_cached_prefix, may be null) is claimed first: its blocks are
  // referenced (its tail block copied, take_copies) and seq.num_computed_tokens /
  // num_cached_tokens are set to its length.
  // Returns false and changes nothing when the free blocks do not suffice. The new tokens
  // may run on into seq.draft_tokens (speculative rows). A running sequence's blocks
  // behind its window move to full-only blocks first (that is not undone on false). With
  // full-only blocks, a hit whose blocks do not fit is dropped for the prompt's start.
  bool allocate(Sequence& seq, int64_t num_new_tokens, const PrefixHit* hit = nullptr);

  // Rolls back what a step wrote past seq's computed tokens (rejected drafts): releases
  // the blocks beyond those that hold seq.num_computed_tokens. Their slots are written
  // again before any of them counts as computed, and no hash ever covered them.
  void trim(Sequence& seq);

  // After a step: registers seq's full blocks whose tokens are all computed.
  void cache_full_blocks(Sequence& seq);

  // Drops seq's references and clears its block table.
  void free(Sequence& seq);

  // A reference held by something other than a sequence (a checkpoint's tail block): the
  // block stays out of the free queue until unpinned.
  void pin(int32_t block_id);
  void unpin(int32_t block_id);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t num_window_blocks() const { return num_window_blocks_; }
  int64_t window() const { return window_; }
  // Free blocks, evictable cached ones included: all of them, and the window blocks
  // (the only ones new tokens can take).
  int64_t num_free_blocks() const { return queues_[0].count + queues_[1].count; }
  int64_t num_free_window_blocks() const { return queues_[0].count; }
  int64_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  int64_t num_cached_blocks() const { return static_cast<int64_t>(cached_[0].size() + cached_[1].size()); }
  bool prefix_caching() const { return prefix_caching_; }
  int32_t ref_count(int32_t block_id) const;
  bool is_cached(int32_t block_id) const;
  std::vector<int32_t> free_queue() const;  // head (allocated next) first; window blocks first
  // The (source, destination) block pairs whose full-attention K/V the next step copies
  // before it writes (Batch::block_copies: a block leaving the sliding window, a hit's
  // tail block), flattened; taking them clears them.
  std::vector<int32_t> take_copies();

  // Prefix-cache counters in tokens: tokens looked up at admission, tokens found.
  int64_t prefix_cache_queries() const { return queries_; }
  int64_t prefix_cache_hits() const { return hits_; }

  // Drops every cached prefix (the KV it described is gone, e.g. with a peer's
  // layers); blocks in use stay allocated but are no longer shareable.
  void forget_cached();

  // Aborts (SPARK_CHECK) if the free queue, ref counts or hash index disagree.
  void check_invariants() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    bool hashed = false;  // registered in cached_
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    std::vector<int32_t> tokens;  // kept to verify a hash hit, so a collision cannot alias
    int32_t prev = -1, next = -1;
    bool in_free_queue = false;
  };

  struct FreeQueue {
    int32_t head = -1, tail = -1;
    int64_t count = 0;
  };
  using Index = std::unordered_map<uint64_t, int32_t>;  // chained block hash -> block id

  // 0 for window blocks, 1 for full-only blocks: which free queue and hash index.
  int kind(int32_t id) const { return id < num_window_blocks_ ? 0 : 1; }
  void extend_hashes(Sequence& seq, int64_t num_tokens) const;
  bool block_matches(int32_t id, const Sequence& seq, int64_t index) const;
  int32_t cached_block(int k, const Sequence& seq, int64_t index) const;  // -1: none
  // The first block index whose tokens the window of a query at position `pos` reaches.
  int64_t first_window_block(int64_t pos) const;
  bool fits(int64_t need, const PrefixHit* hit) const;  // need: new window blocks
  void move_behind_window(Sequence& seq);
  void claim(int32_t id);
  int32_t allocate_block(int k);
  void release_block(int32_t id);
  void push_head(int32_t id);
  void push_tail(int32_t id);
  void unlink(int32_t id);

  int64_t block_size_;
  bool prefix_caching_;
  int64_t window_;
  int64_t num_window_blocks_;
  std::vector<Block> blocks_;
  FreeQueue queues_[2];
  Index cached_[2];
  std::vector<int32_t> copies_;
  int64_t queries_ = 0, hits_ = 0;
};

// The chained hash of one full block: a function of the parent block's hash and the
// block's token ids. The first block's parent is kRootBlockHash.
inline constexpr uint64_t kRootBlockHash = 0x5bd1e9955bd1e995ULL;
uint64_t hash_block(uint64_t parent_hash, const int32_t* tokens, int64_t count);

}  // namespace spark
