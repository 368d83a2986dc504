// state_checkpoints.cpp — the checkpoint pool: lookup by token prefix, LRU eviction, the
// tail blocks checkpoints pin, and the queue of slot copies.
#include "engine/core/state_checkpoints.h"

#include <algorithm>

#include "engine/util/check.h"

namespace spark {

StateCheckpoints::StateCheckpoints(int64_t first_slot, int64_t num_slots, BlockManager& blocks, int64_t min_tokens)
    : first_slot_(first_slot), blocks_(blocks), min_tokens_(std::max<int64_t>(1, min_tokens)) {
  SPARK_CHECK(first_slot >= 0 && num_slots > 0, "state checkpoints need slots");
  slots_.resize(static_cast<size_t>(num_slots));
}

bool StateCheckpoints::starts(const Checkpoint& c, const Sequence& seq, int64_t limit) const {
  const auto n = static_cast<int64_t>(c.tokens.size());
  const int64_t full = n / blocks_.block_size();
  if (n >= limit) return false;
  // The chained hash of the last full block stands for all of them; the tokens decide.
  if (full > 0 && (static_cast<int64_t>(seq.block_hashes.size()) < full ||
                   seq.block_hashes[static_cast<size_t>(full - 1)] != c.block_hashes.back()))
    return false;
  return std::equal(c.tokens.begin(), c.tokens.end(), seq.token_ids.begin());
}

int32_t StateCheckpoints::resume(const Sequence& seq, PrefixHit& hit) {
  const int64_t bs = blocks_.block_size();
  const auto cached = static_cast<int64_t>(hit.blocks.size());
  size_t best = slots_.size();
  int64_t best_tokens = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Checkpoint& c = slots_[i];
    const auto n = static_cast<int64_t>(c.tokens.size());
    if (!c.used || n <= best_tokens || n / bs > cached || !starts(c, seq, seq.num_tokens())) continue;
    best = i;
    best_tokens = n;
  }
  if (best == slots_.size()) {
    hit = {};
    return -1;
  }
  Checkpoint& c = slots_[best];
  c.last_used = ++clock_;
  c.superseded = false;
  hit.blocks.resize(static_cast<size_t>(best_tokens / bs));
  hit.num_tokens = best_tokens;
  hit.tail_block = c.tail_block;
  return slot_of(best);
}

int64_t StateCheckpoints::shared_prefix(const Sequence& seq, int64_t from) const {
  const int64_t bs = blocks_.block_size(), last = seq.num_tokens() - 1;
  int64_t longest = 0;
  for (const Checkpoint& c : slots_) {
    if (!c.used) continue;
    // Whole blocks by their chained hashes first, then token by token.
    const auto hashed = std::min(c.block_hashes.size(), seq.block_hashes.size());
    const auto same_blocks = static_cast<int64_t>(
        std::mismatch(c.block_hashes.begin(), c.block_hashes.begin() + static_cast<std::ptrdiff_t>(hashed),
                      seq.block_hashes.begin()).first - c.block_hashes.begin());
    const int64_t limit = std::min<int64_t>(static_cast<int64_t>(c.tokens.size()), last);
    int64_t n = std::min(same_blocks * bs, limit);
    while (n < limit && c.tokens[static_cast<size_t>(n)] == seq.token_ids[static_cast<size_t>(n)]) ++n;
    longest = std::max(longest, n);
  }
  return longest >= from + min_tokens_ && longest < last ? longest : 0;
}

void StateCheckpoints::save(const Sequence& seq, int32_t slot, bool shared) {
  const int64_t n = seq.num_computed_tokens, bs = blocks_.block_size();
  // A stop among accepted drafts ends the tokens before the state does: nothing to save.
  if (n < min_tokens_ || n > seq.num_tokens()) return;
  for (Checkpoint& c : slots_) {
    const auto size = static_cast<int64_t>(c.tokens.size());
    if (c.used && size == n && std::equal(c.tokens.begin(), c.tokens.end(), seq.token_ids.begin())) {
      c.last_used = ++clock_;
      c.superseded = false;
      c.shared = c.shared || shared;
      return;
    }
    if (c.used && !c.shared && starts(c, seq, n)) c.superseded = true;
  }
  auto it = std::find_if(slots_.begin(), slots_.end(), [](const Checkpoint& c) { return !c.used; });
  if (it == slots_.end())  // superseded ones first, then the least recently used
    it = std::min_element(slots_.begin(), slots_.end(), [](const Checkpoint& a, const Checkpoint& b) {
      return a.superseded != b.superseded ? a.superseded : a.last_used < b.last_used;
    });
  Checkpoint& c = *it;
  if (c.used) evict(c);
  SPARK_CHECK(static_cast<int64_t>(seq.block_table.size()) * bs >= n, "saving a state past the sequence's blocks");
  c.used = true;
  c.tokens.assign(seq.token_ids.begin(), seq.token_ids.begin() + n);
  c.block_hashes.clear();
  for (int64_t i = 0; i < n / bs; ++i) {
    const auto u = static_cast<size_t>(i);
    c.block_hashes.push_back(u < seq.block_hashes.size()
                                 ? seq.block_hashes[u]
                                 : hash_block(i == 0 ? kRootBlockHash : c.block_hashes[u - 1], c.tokens.data() + i * bs, bs));
  }
  c.tail_block = n % bs ? seq.block_table[static_cast<size_t>(n / bs)] : -1;
  if (c.tail_block >= 0) blocks_.pin(c.tail_block);
  c.last_used = ++clock_;
  c.shared = shared;
  copy_state(slot, slot_of(static_cast<size_t>(it - slots_.begin())));
}

void StateCheckpoints::copy_state(int32_t from, int32_t to) {
  SPARK_CHECK(from >= 0 && to >= 0 && from != to, "a state copy between two slots");
  copies_.push_back(from);
  copies_.push_back(to);
}

void StateCheckpoints::evict(Checkpoint& c) {
  if (c.tail_block >= 0) blocks_.unpin(c.tail_block);
  c = Checkpoint{};
}

int64_t StateCheckpoints::pins(int32_t block) const {
  return std::count_if(slots_.begin(), slots_.end(), [block](const Checkpoint& c) { return c.used && c.tail_block == block; });
}

bool StateCheckpoints::evict_pinned() {
  Checkpoint* oldest = nullptr;
  for (Checkpoint& c : slots_)
    if (c.used && c.tail_block >= 0 && blocks_.ref_count(c.tail_block) == pins(c.tail_block) &&
        (!oldest || c.last_used < oldest->last_used))
      oldest = &c;
  if (!oldest) return false;
  evict(*oldest);
  return true;
}

void StateCheckpoints::forget_all() {
  for (Checkpoint& c : slots_)
    if (c.used) evict(c);
  copies_.clear();
}

std::vector<int32_t> StateCheckpoints::take_copies() {
  std::vector<int32_t> out;
  out.swap(copies_);
  return out;
}

int64_t StateCheckpoints::size() const {
  return std::count_if(slots_.begin(), slots_.end(), [](const Checkpoint& c) { return c.used; });
}

int64_t StateCheckpoints::evictable_blocks() const {
  std::vector<int32_t> blocks;
  for (const Checkpoint& c : slots_)
    if (c.used && c.tail_block >= 0 && blocks_.ref_count(c.tail_block) == pins(c.tail_block)) blocks.push_back(c.tail_block);
  std::sort(blocks.begin(), blocks.end());
  return std::unique(blocks.begin(), blocks.end()) - blocks.begin();
}

std::vector<int32_t> StateCheckpoints::tail_blocks() const {
  std::vector<int32_t> out;
  for (const Checkpoint& c : slots_)
    if (c.used && c.tail_block >= 0) out.push_back(c.tail_block);
  return out;
}

void StateCheckpoints::check_invariants() const {
  for (const Checkpoint& c : slots_) {
    if (!c.used) continue;
    const int64_t bs = blocks_.block_size(), n = static_cast<int64_t>(c.tokens.size());
    SPARK_CHECK(n >= min_tokens_ && static_cast<int64_t>(c.block_hashes.size()) == n / bs, "checkpoint hashes wrong");
    SPARK_CHECK((c.tail_block >= 0) == (n % bs != 0), "checkpoint tail block wrong");
    if (c.tail_block >= 0) SPARK_CHECK(blocks_.ref_count(c.tail_block) >= pins(c.tail_block), "a checkpoint's tail block is not held");
  }
}

}  // namespace spark
