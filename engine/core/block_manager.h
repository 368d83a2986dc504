// block_manager.h — the paged KV cache's bookkeeping: block ids, reference counts, a
// free queue in eviction order, and automatic prefix caching of full blocks.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/core/sequence.h"

namespace spark {

// Blocks of a sequence's prompt found in the prefix cache, not yet referenced.
struct PrefixHit {
  std::vector<int32_t> blocks;
  int64_t num_tokens = 0;
};

// Every block is either referenced by sequences (ref_count > 0) or sits in the free
// queue. A free block may still hold a cached full block (its hash stays registered)
// until allocation takes it from the head of the queue: that is the LRU eviction.
//
// Free queue order: a freed block that holds no cached content goes to the head (it is
// worth nothing, reuse it first); a freed cached block goes to the tail. A sequence's
// blocks are released last block first, so its deep blocks are evicted before the
// shared prefix blocks they hang from.
class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching);

  // The longest run of cached full blocks at the start of seq's tokens, leaving at least
  // one token to compute (its logits are needed). Extends seq.block_hashes.
  PrefixHit find_cached_prefix(Sequence& seq);

  // Makes room for num_new_tokens tokens after the computed ones. For a sequence without
  // blocks, `hit` (from find_cached_prefix, may be null) is claimed first: its blocks are
  // referenced and seq.num_computed_tokens / num_cached_tokens are set to its length.
  // Returns false and changes nothing when the free blocks do not suffice. The new tokens
  // may run on into seq.draft_tokens (speculative rows).
  bool allocate(Sequence& seq, int64_t num_new_tokens, const PrefixHit* hit = nullptr);

  // Rolls back what a step wrote past seq's computed tokens (rejected drafts): releases
  // the blocks beyond those that hold seq.num_computed_tokens. Their slots are written
  // again before any of them counts as computed, and no hash ever covered them.
  void trim(Sequence& seq);

  // After a step: registers seq's full blocks whose tokens are all computed.
  void cache_full_blocks(Sequence& seq);

  // Drops seq's references and clears its block table.
  void free(Sequence& seq);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t block_size() const { return block_size_; }
  int64_t num_free_blocks() const { return num_free_; }  // includes evictable cached blocks
  int64_t num_used_blocks() const { return num_blocks() - num_free_; }
  int64_t num_cached_blocks() const { return static_cast<int64_t>(cached_.size()); }
  bool prefix_caching() const { return prefix_caching_; }
  int32_t ref_count(int32_t block_id) const;
  bool is_cached(int32_t block_id) const;
  std::vector<int32_t> free_queue() const;  // head (allocated next) first

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

  void extend_hashes(Sequence& seq, int64_t num_tokens) const;
  bool block_matches(int32_t id, const Sequence& seq, int64_t index) const;
  int32_t allocate_block();
  void release_block(int32_t id);
  void push_head(int32_t id);
  void push_tail(int32_t id);
  void unlink(int32_t id);

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  int32_t head_ = -1, tail_ = -1;
  int64_t num_free_ = 0;
  std::unordered_map<uint64_t, int32_t> cached_;  // chained block hash -> block id
  int64_t queries_ = 0, hits_ = 0;
};

// The chained hash of one full block: a function of the parent block's hash and the
// block's token ids. The first block's parent is kRootBlockHash.
inline constexpr uint64_t kRootBlockHash = 0x5bd1e9955bd1e995ULL;
uint64_t hash_block(uint64_t parent_hash, const int32_t* tokens, int64_t count);

}  // namespace spark
