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

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool enable_prefix_caching, SlidingKv sliding)
    : block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      window_(sliding.window),
      num_window_blocks_(sliding.num_window_blocks > 0 ? sliding.num_window_blocks : num_blocks) {
  SPARK_CHECK(num_blocks > 0 && num_blocks < (int64_t{1} << 31), "num_blocks out of range");
  SPARK_CHECK(block_size > 0, "block_size must be positive");
  SPARK_CHECK(window_ >= 0 && num_window_blocks_ <= num_blocks, "window blocks out of range");
  SPARK_CHECK(num_window_blocks_ == num_blocks || window_ > 0, "full-only blocks without a sliding window");
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (int32_t id = 0; id < static_cast<int32_t>(num_blocks); ++id) push_tail(id);
}

// ---- free queues (intrusive doubly linked lists over block ids) --------------------

void BlockManager::push_tail(int32_t id) {
  Block& b = blocks_[id];
  FreeQueue& q = queues_[kind(id)];
  SPARK_CHECK(!b.in_free_queue && b.ref_count == 0, "block " + std::to_string(id) + " freed twice");
  b.prev = q.tail;
  b.next = -1;
  if (q.tail >= 0) blocks_[q.tail].next = id; else q.head = id;
  q.tail = id;
  b.in_free_queue = true;
  ++q.count;
}

void BlockManager::push_head(int32_t id) {
  Block& b = blocks_[id];
  FreeQueue& q = queues_[kind(id)];
  SPARK_CHECK(!b.in_free_queue && b.ref_count == 0, "block " + std::to_string(id) + " freed twice");
  b.prev = -1;
  b.next = q.head;
  if (q.head >= 0) blocks_[q.head].prev = id; else q.tail = id;
  q.head = id;
  b.in_free_queue = true;
  ++q.count;
}

void BlockManager::unlink(int32_t id) {
  Block& b = blocks_[id];
  FreeQueue& q = queues_[kind(id)];
  SPARK_CHECK(b.in_free_queue, "block " + std::to_string(id) + " is not free");
  if (b.prev >= 0) blocks_[b.prev].next = b.next; else q.head = b.next;
  if (b.next >= 0) blocks_[b.next].prev = b.prev; else q.tail = b.prev;
  b.prev = b.next = -1;
  b.in_free_queue = false;
  --q.count;
}

int32_t BlockManager::allocate_block(int k) {
  SPARK_CHECK(queues_[k].head >= 0, "no free KV block (the caller checks the free counts first)");
  int32_t id = queues_[k].head;
  unlink(id);
  Block& b = blocks_[id];
  if (b.hashed) {  // evict the cached content this block held
    auto it = cached_[k].find(b.hash);
    SPARK_CHECK(it != cached_[k].end() && it->second == id, "hash index out of sync");
    cached_[k].erase(it);
    b.hashed = false;
    b.tokens.clear();
  }
  b.ref_count = 1;
  return id;
}

void BlockManager::claim(int32_t id) {
  if (blocks_[id].ref_count == 0) unlink(id);
  ++blocks_[id].ref_count;
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

int32_t BlockManager::cached_block(int k, const Sequence& seq, int64_t index) const {
  auto it = cached_[k].find(seq.block_hashes[index]);
  return it != cached_[k].end() && block_matches(it->second, seq, index) ? it->second : -1;
}

int64_t BlockManager::first_window_block(int64_t pos) const {
  if (window_ == 0) return INT64_MAX;  // no sliding layers: no block needs them
  return std::max<int64_t>(0, pos - window_ + 1) / block_size_;
}

PrefixHit BlockManager::find_cached_prefix(Sequence& seq) {
  PrefixHit hit;
  if (!prefix_caching_) return hit;
  // The last token is always computed: the step that computes it yields the logits.
  int64_t max_blocks = (seq.num_tokens() - 1) / block_size_;
  extend_hashes(seq, max_blocks * block_size_);
  std::vector<int32_t> in_window, full_only;  // the cached copies of each block, -1: none
  for (int64_t i = 0; i < max_blocks; ++i) {
    const int32_t w = cached_block(0, seq, i), f = cached_block(1, seq, i);
    if (w < 0 && f < 0) break;
    in_window.push_back(w);
    full_only.push_back(f);
  }
  // The first token computed after a hit of k blocks reads its window's tokens in the
  // sliding layers: the blocks holding them must be window blocks.
  auto window_held = [&](int64_t k) {
    for (int64_t i = std::min(first_window_block(k * block_size_), k); i < k; ++i)
      if (in_window[static_cast<size_t>(i)] < 0) return false;
    return true;
  };
  auto k = static_cast<int64_t>(in_window.size());
  while (k > 0 && !window_held(k)) --k;
  const int64_t first = std::min(first_window_block(k * block_size_), k);
  for (int64_t i = 0; i < k; ++i) {
    const auto u = static_cast<size_t>(i);
    hit.blocks.push_back(i < first && full_only[u] >= 0 ? full_only[u] : in_window[u]);
  }
  hit.num_tokens = k * block_size_;
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
    Index& index = cached_[kind(id)];
    if (index.count(h)) continue;  // identical content already cached in another block
    b.hashed = true;
    b.hash = h;
    b.parent_hash = i == 0 ? kRootBlockHash : seq.block_hashes[i - 1];
    b.tokens.assign(seq.token_ids.begin() + i * block_size_, seq.token_ids.begin() + (i + 1) * block_size_);
    index.emplace(h, id);
  }
}

// ---- blocks behind the window ----------------------------------------------------------

// Every block before the one the next query's window starts in is read by full-attention
// layers only from now on: the sequence takes a full-only block with the same content
// instead (a cached one, or a fresh one the next step copies the K/V into) and lets the
// window block go. A cached window block goes to the tail of its free queue still hashed:
// a prefix hit ending near it reuses its sliding layers' K/V until it is evicted.
void BlockManager::move_behind_window(Sequence& seq) {
  if (num_window_blocks_ == num_blocks()) return;
  const int64_t dead = std::min(first_window_block(seq.num_computed_tokens), static_cast<int64_t>(seq.block_table.size()));
  for (int64_t i = 0; i < dead; ++i) {
    const int32_t from = seq.block_table[static_cast<size_t>(i)];
    if (kind(from) == 1) continue;
    const Block& b = blocks_[from];
    int32_t to = -1;
    if (b.hashed) {
      auto it = cached_[1].find(b.hash);
      if (it != cached_[1].end() && blocks_[it->second].parent_hash == b.parent_hash && blocks_[it->second].tokens == b.tokens)
        to = it->second;
    }
    if (to >= 0) {
      claim(to);
    } else {
      if (queues_[1].count == 0) return;  // no room: it stays a window block for now
      to = allocate_block(1);
      copies_.push_back(from);
      copies_.push_back(to);
      if (b.hashed && !cached_[1].count(b.hash)) {
        Block& t = blocks_[to];
        t.hashed = true;
        t.hash = b.hash;
        t.parent_hash = b.parent_hash;
        t.tokens = b.tokens;
        cached_[1].emplace(t.hash, to);
      }
    }
    seq.block_table[static_cast<size_t>(i)] = to;
    release_block(from);
  }
}

std::vector<int32_t> BlockManager::take_copies() {
  std::vector<int32_t> out;
  out.swap(copies_);
  return out;
}

// ---- allocation ----------------------------------------------------------------------

bool BlockManager::fits(int64_t need, const PrefixHit* hit) const {
  // Hit blocks that sit in a free queue stop being available once referenced.
  int64_t from_free[2] = {0, 0};
  if (hit)
    for (int32_t id : hit->blocks) from_free[kind(id)] += blocks_[id].ref_count == 0 ? 1 : 0;
  return need + from_free[0] <= queues_[0].count && from_free[1] <= queues_[1].count;
}

bool BlockManager::allocate(Sequence& seq, int64_t num_new_tokens, const PrefixHit* hit) {
  SPARK_CHECK(num_new_tokens > 0, "allocate needs at least one new token");
  bool admitting = seq.block_table.empty();
  SPARK_CHECK(admitting || hit == nullptr || hit->blocks.empty(), "a prefix hit is claimed only at admission");
  if (!admitting) move_behind_window(seq);
  if (!admitting || (hit && hit->num_tokens == 0)) hit = nullptr;
  auto need_for = [&](const PrefixHit* h) {
    const int64_t computed = admitting ? (h ? h->num_tokens : 0) : seq.num_computed_tokens;
    const int64_t have = admitting ? (h ? static_cast<int64_t>(h->blocks.size()) : 0)
                                   : static_cast<int64_t>(seq.block_table.size());
    return std::max<int64_t>(0, cdiv(computed + num_new_tokens, block_size_) - have);
  };
  // A hit can hold more window blocks than are free (blocks finished sequences left before
  // they moved): the prompt then starts from scratch, which always fits an idle cache.
  if (hit && !fits(need_for(hit), hit) && num_window_blocks_ < num_blocks()) hit = nullptr;
  const int64_t hit_tokens = hit ? hit->num_tokens : 0;
  const int64_t computed = admitting ? hit_tokens : seq.num_computed_tokens;
  SPARK_CHECK(computed + num_new_tokens <= seq.num_tokens() + static_cast<int64_t>(seq.draft_tokens.size()),
              "allocating past the sequence's tokens and drafts");
  const int64_t need = need_for(hit);
  if (!fits(need, hit)) return false;

  if (admitting) {
    if (hit) {
      for (size_t i = 0; i < hit->blocks.size(); ++i) {
        int32_t id = hit->blocks[i];
        SPARK_CHECK(block_matches(id, seq, static_cast<int64_t>(i)), "stale prefix hit");
        claim(id);
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
  for (int64_t i = 0; i < need; ++i) seq.block_table.push_back(allocate_block(0));
  if (hit && hit->tail_block >= 0) {
    SPARK_CHECK(hit->num_tokens > static_cast<int64_t>(hit->blocks.size()) * block_size_ &&
                    hit->num_tokens < static_cast<int64_t>(hit->blocks.size() + 1) * block_size_ &&
                    ref_count(hit->tail_block) > 0,
                "a prefix hit's tail block must hold its last partial block");
    copies_.push_back(hit->tail_block);
    copies_.push_back(seq.block_table[hit->blocks.size()]);
  }
  return true;
}

void BlockManager::pin(int32_t block_id) {
  SPARK_CHECK(block_id >= 0 && block_id < static_cast<int32_t>(blocks_.size()), "block id out of range");
  claim(block_id);
}

void BlockManager::unpin(int32_t block_id) { release_block(block_id); }

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
  for (const FreeQueue& q : queues_)
    for (int32_t id = q.head; id >= 0; id = blocks_[id].next) ids.push_back(id);
  return ids;
}

void BlockManager::forget_cached() {
  for (Block& b : blocks_) {
    b.hashed = false;
    b.tokens.clear();
  }
  for (Index& index : cached_) index.clear();
}

void BlockManager::check_invariants() const {
  for (int k = 0; k < 2; ++k) {
    const FreeQueue& q = queues_[k];
    int64_t walked = 0;
    int32_t prev = -1;
    for (int32_t id = q.head; id >= 0; id = blocks_[id].next) {
      const Block& b = blocks_[id];
      SPARK_CHECK(kind(id) == k, "a block in the other kind's free queue");
      SPARK_CHECK(b.in_free_queue && b.ref_count == 0, "free queue holds a referenced block");
      SPARK_CHECK(b.prev == prev, "free queue links broken");
      prev = id;
      SPARK_CHECK(++walked <= num_blocks(), "free queue has a cycle");
    }
    SPARK_CHECK(prev == q.tail, "free queue tail wrong");
    SPARK_CHECK(walked == q.count, "free count wrong");
  }
  int64_t hashed = 0;
  for (int32_t id = 0; id < static_cast<int32_t>(blocks_.size()); ++id) {
    const Block& b = blocks_[id];
    SPARK_CHECK(b.ref_count >= 0, "negative ref count");
    SPARK_CHECK(b.in_free_queue == (b.ref_count == 0), "block neither referenced nor free (leak)");
    if (b.hashed) {
      ++hashed;
      auto it = cached_[kind(id)].find(b.hash);
      SPARK_CHECK(it != cached_[kind(id)].end() && it->second == id, "hashed block missing from index");
      SPARK_CHECK(static_cast<int64_t>(b.tokens.size()) == block_size_, "cached block without its tokens");
    }
  }
  SPARK_CHECK(hashed == num_cached_blocks(), "hash index has stale entries");
}

}  // namespace spark
