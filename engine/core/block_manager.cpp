// block_manager.cpp — KV block allocation, reference counting, LRU free queue and the
// prefix-cache hash index.
#include "engine/core/block_manager.h"

#include <algorithm>

#include "engine/util/check.h"

namespace spark {

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer: every input bit moves every output bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

uint64_t hash_block(uint64_t parent_hash, const int32_t* tokens, int64_t count) {
  uint64_t h = mix64(parent_hash ^ 0x9e3779b97f4a7c15ULL);
  for (int64_t i = 0; i < count; ++i) h = mix64(h + static_cast<uint32_t>(tokens[i]) + 0x9e3779b97f4a7c15ULL);
  return h;
}

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching) {
  SPARK_CHECK(num_blocks > 0 && num_blocks < (int64_t{1} << 31), "num_blocks out of range");
  SPARK_CHECK(block_size > 0, "block_size must be positive");
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (int32_t id = 0; id < static_cast<int32_t>(num_blocks); ++id) push_tail(id);
}

// ---- free queue (intrusive doubly linked list over block ids) ----------------------

void BlockManager::push_tail(int32_t id) {
  Block& b = blocks_[id];
  SPARK_CHECK(!b.in_free_queue && b.ref_count == 0, "block " + std::to_string(id) + " freed twice");
  b.prev = tail_;
  b.next = -1;
  if (tail_ >= 0) blocks_[tail_].next = id; else head_ = id;
  tail_ = id;
  b.in_free_queue = true;
  ++num_free_;
}

void BlockManager::push_head(int32_t id) {
  Block& b = blocks_[id];
  SPARK_CHECK(!b.in_free_queue && b.ref_count == 0, "block " + std::to_string(id) + " freed twice");
  b.prev = -1;
  b.next = head_;
  if (head_ >= 0) blocks_[head_].prev = id; else tail_ = id;
  head_ = id;
  b.in_free_queue = true;
  ++num_free_;
}

void BlockManager::unlink(int32_t id) {
  Block& b = blocks_[id];
  SPARK_CHECK(b.in_free_queue, "block " + std::to_string(id) + " is not free");
  if (b.prev >= 0) blocks_[b.prev].next = b.next; else head_ = b.next;
  if (b.next >= 0) blocks_[b.next].prev = b.prev; else tail_ = b.prev;
  b.prev = b.next = -1;
  b.in_free_queue = false;
  --num_free_;
}

int32_t BlockManager::allocate_block() {
  SPARK_CHECK(head_ >= 0, "no free KV block (the caller checks num_free_blocks first)");
  int32_t id = head_;
  unlink(id);
  Block& b = blocks_[id];
  if (b.hashed) {  // evict the cached content this block held
    auto it = cached_.find(b.hash);
    SPARK_CHECK(it != cached_.end() && it->second == id, "hash index out of sync");
    cached_.erase(it);
    b.hashed = false;
    b.tokens.clear();
  }
  b.ref_count = 1;
  return id;
}

void BlockManager::release_block(int32_t id) {
  SPARK_CHECK(id >= 0 && id < static_cast<int32_t>(blocks_.size()), "block id out of range");
  Block& b = blocks_[id];
  SPARK_CHECK(b.ref_count > 0, "block " + std::to_string(id) + " released with ref_count 0 (double free)");
  if (--b.ref_count == 0) {
    if (b.hashed) push_tail(id); else push_head(id);
  }
}

// ---- prefix caching ----------------------------------------------------------------

void BlockManager::extend_hashes(Sequence& seq, int64_t num_tokens) const {
  int64_t full = std::min(num_tokens, seq.num_tokens()) / block_size_;
  while (static_cast<int64_t>(seq.block_hashes.size()) < full) {
    int64_t i = static_cast<int64_t>(seq.block_hashes.size());
    uint64_t parent = i == 0 ? kRootBlockHash : seq.block_hashes[i - 1];
    seq.block_hashes.push_back(hash_block(parent, seq.token_ids.data() + i * block_size_, block_size_));
  }
}

bool BlockManager::block_matches(int32_t id, const Sequence& seq, int64_t index) const {
  const Block& b = blocks_[id];
  uint64_t parent = index == 0 ? kRootBlockHash : seq.block_hashes[index - 1];
  return b.hashed && b.hash == seq.block_hashes[index] && b.parent_hash == parent &&
         std::equal(b.tokens.begin(), b.tokens.end(), seq.token_ids.begin() + index * block_size_);
}

PrefixHit BlockManager::find_cached_prefix(Sequence& seq) {
  PrefixHit hit;
  if (!prefix_caching_) return hit;
  // The last token is always computed: the step that computes it yields the logits.
  int64_t max_blocks = (seq.num_tokens() - 1) / block_size_;
  extend_hashes(seq, max_blocks * block_size_);
  for (int64_t i = 0; i < max_blocks; ++i) {
    auto it = cached_.find(seq.block_hashes[i]);
    if (it == cached_.end() || !block_matches(it->second, seq, i)) break;
    hit.blocks.push_back(it->second);
  }
  hit.num_tokens = static_cast<int64_t>(hit.blocks.size()) * block_size_;
  return hit;
}

void BlockManager::cache_full_blocks(Sequence& seq) {
  if (!prefix_caching_) return;
  int64_t full = std::min<int64_t>(seq.num_computed_tokens / block_size_, static_cast<int64_t>(seq.block_table.size()));
  extend_hashes(seq, full * block_size_);
  for (int64_t i = 0; i < full; ++i) {
    int32_t id = seq.block_table[i];
    Block& b = blocks_[id];
    if (b.hashed) continue;  // a prefix hit, or registered in an earlier step
    uint64_t h = seq.block_hashes[i];
    if (cached_.count(h)) continue;  // identical content already cached in another block
    b.hashed = true;
    b.hash = h;
    b.parent_hash = i == 0 ? kRootBlockHash : seq.block_hashes[i - 1];
    b.tokens.assign(seq.token_ids.begin() + i * block_size_, seq.token_ids.begin() + (i + 1) * block_size_);
    cached_.emplace(h, id);
  }
}

// ---- allocation ----------------------------------------------------------------------

bool BlockManager::allocate(Sequence& seq, int64_t num_new_tokens, const PrefixHit* hit) {
  SPARK_CHECK(num_new_tokens > 0, "allocate needs at least one new token");
  bool admitting = seq.block_table.empty();
  SPARK_CHECK(admitting || hit == nullptr || hit->blocks.empty(), "a prefix hit is claimed only at admission");
  int64_t hit_tokens = admitting && hit ? hit->num_tokens : 0;
  int64_t computed = admitting ? hit_tokens : seq.num_computed_tokens;
  SPARK_CHECK(computed + num_new_tokens <= seq.num_tokens() + static_cast<int64_t>(seq.draft_tokens.size()),
              "allocating past the sequence's tokens and drafts");

  int64_t have = admitting ? (hit ? static_cast<int64_t>(hit->blocks.size()) : 0)
                           : static_cast<int64_t>(seq.block_table.size());
  int64_t need = std::max<int64_t>(0, cdiv(computed + num_new_tokens, block_size_) - have);
  // Hit blocks that sit in the free queue stop being available once referenced.
  int64_t hit_from_free = 0;
  if (admitting && hit)
    for (int32_t id : hit->blocks) hit_from_free += blocks_[id].ref_count == 0 ? 1 : 0;
  if (need + hit_from_free > num_free_) return false;

  if (admitting) {
    if (hit) {
      for (size_t i = 0; i < hit->blocks.size(); ++i) {
        int32_t id = hit->blocks[i];
        SPARK_CHECK(block_matches(id, seq, static_cast<int64_t>(i)), "stale prefix hit");
        if (blocks_[id].ref_count == 0) unlink(id);
        ++blocks_[id].ref_count;
        seq.block_table.push_back(id);
      }
    }
    seq.num_computed_tokens = hit_tokens;
    seq.num_cached_tokens = hit_tokens;
    if (prefix_caching_) {
      queries_ += seq.num_tokens();
      hits_ += hit_tokens;
    }
  }
  for (int64_t i = 0; i < need; ++i) seq.block_table.push_back(allocate_block());
  return true;
}

void BlockManager::trim(Sequence& seq) {
  const auto keep = static_cast<size_t>(cdiv(seq.num_computed_tokens, block_size_));
  while (seq.block_table.size() > keep) {
    release_block(seq.block_table.back());
    seq.block_table.pop_back();
  }
}

void BlockManager::free(Sequence& seq) {
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) release_block(*it);
  seq.block_table.clear();
}

// ---- inspection ----------------------------------------------------------------------

int32_t BlockManager::ref_count(int32_t id) const {
  SPARK_CHECK(id >= 0 && id < static_cast<int32_t>(blocks_.size()), "block id out of range");
  return blocks_[id].ref_count;
}

bool BlockManager::is_cached(int32_t id) const {
  SPARK_CHECK(id >= 0 && id < static_cast<int32_t>(blocks_.size()), "block id out of range");
  return blocks_[id].hashed;
}

std::vector<int32_t> BlockManager::free_queue() const {
  std::vector<int32_t> ids;
  for (int32_t id = head_; id >= 0; id = blocks_[id].next) ids.push_back(id);
  return ids;
}

void BlockManager::forget_cached() {
  for (Block& b : blocks_) {
    b.hashed = false;
    b.tokens.clear();
  }
  cached_.clear();
}

void BlockManager::check_invariants() const {
  int64_t walked = 0;
  int32_t prev = -1;
  for (int32_t id = head_; id >= 0; id = blocks_[id].next) {
    const Block& b = blocks_[id];
    SPARK_CHECK(b.in_free_queue && b.ref_count == 0, "free queue holds a referenced block");
    SPARK_CHECK(b.prev == prev, "free queue links broken");
    prev = id;
    SPARK_CHECK(++walked <= num_blocks(), "free queue has a cycle");
  }
  SPARK_CHECK(prev == tail_, "free queue tail wrong");
  SPARK_CHECK(walked == num_free_, "free count wrong");
  int64_t hashed = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(blocks_.size()); ++id) {
    const Block& b = blocks_[id];
    SPARK_CHECK(b.ref_count >= 0, "negative ref count");
    SPARK_CHECK(b.in_free_queue == (b.ref_count == 0), "block neither referenced nor free (leak)");
    if (b.hashed) {
      ++hashed;
      auto it = cached_.find(b.hash);
      SPARK_CHECK(it != cached_.end() && it->second == id, "hashed block missing from index");
      SPARK_CHECK(static_cast<int64_t>(b.tokens.size()) == block_size_, "cached block without its tokens");
    }
  }
  SPARK_CHECK(hashed == static_cast<int64_t>(cached_.size()), "hash index has stale entries");
}

}  // namespace spark
