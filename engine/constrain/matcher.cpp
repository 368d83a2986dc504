// matcher.cpp — stack sets, the byte step, and the trie walk that yields token masks.
#include "engine/constrain/matcher.h"

#include <algorithm>
#include <array>

#include "engine/constrain/min_length.h"
#include "engine/util/check.h"

namespace spark::constrain {
namespace {

// Bytes the string-body automaton accepts in each state (the walk's first-byte filter).
std::array<ByteSet, kStringStates> make_string_first() {
  std::array<ByteSet, kStringStates> sets;
  for (uint8_t s = 0; s < kStringStates; ++s)
    for (int b = 0; b < 256; ++b)
      if (string_body_step(s, uint8_t(b)) != kStringDead) sets[s].add(uint8_t(b));
  return sets;
}

const std::array<ByteSet, kStringStates>& string_first() {
  static const auto sets = make_string_first();
  return sets;
}

uint64_t hash_node(uint32_t pos, uint32_t sub, uint32_t parent) {
  uint64_t h = uint64_t(pos) * 0x9E3779B97F4A7C15ull ^ uint64_t(parent) * 0xC2B2AE3D27D4EB4Full ^
               uint64_t(sub) * 0x165667B19E3779F9ull;
  return h ^ (h >> 29);
}

// Grammars are validated free of left recursion, so expansion depth is bounded by the
// grammar; this bound catches a bug instead of overflowing the stack.
constexpr int kMaxExpandDepth = 100'000;

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTable> tokens)
    : grammar_(std::move(grammar)), tokens_(std::move(tokens)) {
  nodes_.push_back({0, 0, 0});
  table_.assign(1024, 0);
  table_gen_.assign(1024, 0);
  for (uint32_t start : grammar_->rules[grammar_->root]) expand(intern(start, 0, 0), leaves_, 0);
  std::sort(leaves_.begin(), leaves_.end());
  leaves_.erase(std::unique(leaves_.begin(), leaves_.end()), leaves_.end());
  compact();
  for (const auto& [id, text] : tokens_->markup())
    if (std::find(grammar_->markers.begin(), grammar_->markers.end(), text) != grammar_->markers.end())
      marker_tokens_.emplace_back(id, text);
  std::sort(marker_tokens_.begin(), marker_tokens_.end());
}

bool Matcher::takes(std::string_view text, uint32_t finish_within) {
  std::vector<uint32_t> cur = leaves_, next;
  for (char c : text) {
    next.clear();
    step(cur, 0, cur.size(), uint8_t(c), next);
    if (next.empty()) return false;
    cur.swap(next);
  }
  return finish_within == kNoLimit || min_rest(cur, 0, cur.size()) <= finish_within;
}

uint32_t Matcher::intern(uint32_t pos, uint32_t sub, uint32_t parent) {
  if ((table_used_ + 1) * 2 > table_.size()) {  // grow and re-insert every node
    table_.assign(table_.size() * 2, 0);
    table_gen_.assign(table_.size(), 0);
    reset_intern(nodes_.size());
  }
  const size_t slots = table_.size() - 1;
  for (size_t i = hash_node(pos, sub, parent) & slots;; i = (i + 1) & slots) {
    if (table_gen_[i] != gen_) {
      table_gen_[i] = gen_;
      table_[i] = uint32_t(nodes_.size());
      ++table_used_;
      nodes_.push_back({pos, sub, parent});
      return table_[i];
    }
    const Node& n = nodes_[table_[i]];
    if (n.pos == pos && n.sub == sub && n.parent == parent) return table_[i];
  }
}

void Matcher::reset_intern(size_t keep_nodes) {
  nodes_.resize(keep_nodes);
  if (++gen_ == 0) {
    std::fill(table_gen_.begin(), table_gen_.end(), 0);
    gen_ = 1;
  }
  table_used_ = 0;
  const size_t slots = table_.size() - 1;
  for (uint32_t id = 1; id < nodes_.size(); ++id) {
    const Node& n = nodes_[id];
    size_t i = hash_node(n.pos, n.sub, n.parent) & slots;
    while (table_gen_[i] == gen_) i = (i + 1) & slots;
    table_gen_[i] = gen_;
    table_[i] = id;
    ++table_used_;
  }
}

// The frame that continues after the element at `pos`: a tail position returns straight
// to the parent, so right recursion (repetition) does not grow the stack.
uint32_t Matcher::frame_after(uint32_t pos, uint32_t parent) {
  if (parent != 0 && grammar_->elems[pos + 1].kind == ElemKind::END) return parent;
  return intern(pos + 1, 0, parent);
}

// Bounded bodies count each character as it starts, and start none past their maximum.
uint32_t Matcher::body_step(const Elem& body, uint32_t sub, uint8_t b) const {
  const uint8_t state = body_state(sub);
  uint32_t chars = body_chars(sub);
  if (state == kStringBoundary && body.index != 0) {
    if (chars >= grammar_->string_bounds[body.index].max) return kDeadBody;
    ++chars;
  }
  const uint8_t next = string_body_step(state, b);
  return next == kStringDead ? kDeadBody : next | chars << kBodyStateBits;
}

const ByteSet& Matcher::body_first(const Elem& body, uint32_t sub) const {
  static const ByteSet none;
  const uint8_t state = body_state(sub);
  if (state == kStringBoundary && body.index != 0 && body_chars(sub) >= grammar_->string_bounds[body.index].max) return none;
  return string_first()[state];
}

bool Matcher::body_may_close(const Elem& body, uint32_t sub) const {
  return body_state(sub) == kStringBoundary && body_chars(sub) >= grammar_->string_bounds[body.index].min;
}

void Matcher::expand(uint32_t node, std::vector<uint32_t>& out, int depth) {
  SPARK_CHECK(depth < kMaxExpandDepth, "grammar expansion too deep");
  const Node n = nodes_[node];  // a copy: interning may move the arena
  const Elem e = grammar_->elems[n.pos];
  switch (e.kind) {
    case ElemKind::END:
      if (n.parent == 0) out.push_back(kAccept);
      else expand(n.parent, out, depth + 1);
      return;
    case ElemKind::BYTES:
      out.push_back(node);
      return;
    case ElemKind::STRING_BODY:
      out.push_back(node);
      if (body_may_close(e, n.sub)) expand(frame_after(n.pos, n.parent), out, depth + 1);
      return;
    case ElemKind::COUNTED: {
      if (!(n.sub & kRegionFrame)) {  // entering: the region's frame, then its rule
        const uint32_t frame = intern(n.pos, region_sub(kStringBoundary, 0), n.parent);
        for (uint32_t start : grammar_->rules[grammar_->counted[e.index].rule]) expand(intern(start, 0, frame), out, depth + 1);
      } else if (region_state(n.sub) == kStringBoundary && region_chars(n.sub) >= grammar_->counted[e.index].bounds.min) {
        expand(frame_after(n.pos, n.parent), out, depth + 1);  // its rule finished within the bounds
      }
      return;
    }
    case ElemKind::RULE: {
      const uint32_t ret = frame_after(n.pos, n.parent);
      for (uint32_t start : grammar_->rules[e.index]) expand(intern(start, 0, ret), out, depth + 1);
      return;
    }
  }
}

void Matcher::step(const std::vector<uint32_t>& from, size_t begin, size_t end, uint8_t b, std::vector<uint32_t>& out) {
  const size_t out_begin = out.size();
  for (size_t i = begin; i < end; ++i) {
    const uint32_t leaf = from[i];  // by index: `out` may be `from`, and grow
    if (leaf == kAccept) continue;
    const Node n = nodes_[leaf];
    const Elem e = grammar_->elems[n.pos];
    if (e.kind == ElemKind::BYTES) {
      if (!grammar_->byte_sets[e.index].has(b)) continue;
      if (grammar_->in_region[n.pos]) region_step(leaf, b, out);
      else expand(frame_after(n.pos, n.parent), out, 0);
    } else {
      const uint32_t next = body_step(e, n.sub, b);
      if (next != kDeadBody) expand(intern(n.pos, next, n.parent), out, 0);
    }
  }
  if (out.size() - out_begin > 1) {
    std::sort(out.begin() + long(out_begin), out.end());
    out.erase(std::unique(out.begin() + long(out_begin), out.end()), out.end());
  }
}

namespace {
uint32_t add_chars(uint32_t a, uint32_t b) {
  return a == kUnboundedChars || b == kUnboundedChars ? kUnboundedChars : uint32_t(std::min<uint64_t>(uint64_t(a) + b, kUnboundedChars - 1));
}
}  // namespace

void Matcher::region_step(uint32_t leaf, uint8_t b, std::vector<uint32_t>& out) {
  const Node n = nodes_[leaf];
  // The frames up to the region's, and the characters the rest of the region needs.
  uint32_t need_min = grammar_->min_chars[n.pos + 1], need_max = grammar_->max_chars[n.pos + 1];
  uint32_t frames[64], depth = 0, id = n.parent;
  std::vector<uint32_t> more;  // past 64 frames (a deeply nested pattern)
  while (grammar_->elems[nodes_[id].pos].kind != ElemKind::COUNTED) {
    if (depth < 64) frames[depth] = id;
    else more.push_back(id);
    ++depth;
    need_min = add_lengths(need_min, grammar_->min_chars[nodes_[id].pos]);
    need_max = add_chars(need_max, grammar_->max_chars[nodes_[id].pos]);
    id = nodes_[id].parent;
  }
  const Node frame = nodes_[id];
  const StringBounds& bounds = grammar_->counted[grammar_->elems[frame.pos].index].bounds;
  const uint8_t state = region_state(frame.sub);
  const uint32_t chars = region_chars(frame.sub) + (state == kStringBoundary ? 1 : 0);
  const uint8_t next = string_body_step(state, b);
  if (next == kStringDead) return;
  if (uint64_t(chars) + need_min > bounds.max) return;
  if (need_max != kUnboundedChars && uint64_t(chars) + need_max < bounds.min) return;
  uint32_t parent = intern(frame.pos, region_sub(next, chars), frame.parent);
  for (uint32_t i = depth; i-- > 0;) {
    const Node f = nodes_[i < 64 ? frames[i] : more[i - 64]];
    parent = intern(f.pos, f.sub, parent);
  }
  expand(frame_after(n.pos, parent), out, 0);
}

// Inside a region: the bytes to its end, but at least a byte per character its minLength
// still asks for; then what follows the region.
uint32_t Matcher::region_rest(uint32_t node) {
  uint32_t inner = 0, id = node;
  while (grammar_->elems[nodes_[id].pos].kind != ElemKind::COUNTED) {
    inner = add_lengths(inner, grammar_->min_rest[nodes_[id].pos]);
    id = nodes_[id].parent;
  }
  const Node frame = nodes_[id];
  const uint32_t min = grammar_->counted[grammar_->elems[frame.pos].index].bounds.min, chars = region_chars(frame.sub);
  inner = std::max(inner, min > chars ? min - chars : 0);
  return add_lengths(add_lengths(inner, grammar_->min_rest[frame.pos + 1]), rest_of(frame.parent));
}

ByteSet Matcher::first_bytes(const std::vector<uint32_t>& leaves, size_t begin, size_t end) const {
  ByteSet set;
  for (size_t i = begin; i < end; ++i) {
    const uint32_t leaf = leaves[i];
    if (leaf == kAccept) continue;
    const Node& n = nodes_[leaf];
    const Elem& e = grammar_->elems[n.pos];
    const ByteSet& s = e.kind == ElemKind::BYTES ? grammar_->byte_sets[e.index] : body_first(e, n.sub);
    for (int w = 0; w < 4; ++w) set.bits[w] |= s.bits[w];
  }
  return set;
}

uint32_t Matcher::rest_of(uint32_t node) {
  if (node == kAccept || node == 0) return 0;
  if (node < memo_.size() && memo_[node] != kNoLimit) return memo_[node];
  const Node n = nodes_[node];
  const Elem& e = grammar_->elems[n.pos];
  if (grammar_->in_region[n.pos]) {
    const uint32_t rest = region_rest(node);
    if (memo_.size() < nodes_.size()) memo_.resize(nodes_.size(), kNoLimit);
    memo_[node] = rest;
    return rest;
  }
  uint32_t own = grammar_->min_rest[n.pos];
  if (e.kind == ElemKind::STRING_BODY) {  // finish the character, then the characters minLength still asks for
    const uint32_t min = grammar_->string_bounds[e.index].min, chars = body_chars(n.sub);
    own = add_lengths(add_lengths(grammar_->min_rest[n.pos + 1], string_body_min_close(body_state(n.sub))),
                      min > chars ? min - chars : 0);
  }
  const uint32_t rest = add_lengths(own, rest_of(n.parent));
  if (memo_.size() < nodes_.size()) memo_.resize(nodes_.size(), kNoLimit);
  memo_[node] = rest;
  return rest;
}

uint32_t Matcher::min_rest(const std::vector<uint32_t>& leaves, size_t begin, size_t end) {
  uint32_t best = kUnreachableBytes;
  for (size_t i = begin; i < end && best > 0; ++i) best = std::min(best, rest_of(leaves[i]));
  return best;
}

uint32_t Matcher::min_bytes_to_finish() {
  memo_.clear();
  const uint32_t best = min_rest(leaves_, 0, leaves_.size());
  memo_.clear();
  return best;
}

// The walk's stack sets are numbered as they are met, each byte's step from a set is taken
// once and kept (a lazy DFA over stack sets, for one mask): most trie nodes then cost a
// table lookup, as where a long run of letters keeps a pattern or an email in one state.
void Matcher::reset_sets() {
  set_leaves_.clear();
  set_range_.clear();
  set_first_.clear();
  set_next_.clear();
  set_next_sparse_.clear();
  set_rest_.clear();
  set_by_hash_.clear();
}

uint32_t Matcher::find_set(const std::vector<uint32_t>& leaves) {
  uint64_t h = leaves.size();
  for (uint32_t leaf : leaves) h = (h ^ leaf) * 0x100000001B3ull;
  auto [it, end] = set_by_hash_.equal_range(h);
  for (; it != end; ++it) {
    const auto [b, e] = set_range_[it->second];
    if (e - b == leaves.size() && std::equal(leaves.begin(), leaves.end(), set_leaves_.begin() + long(b))) return it->second;
  }
  const uint32_t id = uint32_t(set_range_.size());
  set_range_.emplace_back(uint32_t(set_leaves_.size()), uint32_t(set_leaves_.size() + leaves.size()));
  set_leaves_.insert(set_leaves_.end(), leaves.begin(), leaves.end());
  set_first_.push_back(first_bytes(leaves, 0, leaves.size()));
  if (id < kDenseSets) set_next_.resize(set_next_.size() + 256, kUnknownSet);
  set_rest_.push_back(kUnknownSet);
  set_by_hash_.emplace(h, id);
  return id;
}

// The first kDenseSets sets keep their steps in a table row each; a grammar that makes more
// (an enum of many strings: a set per prefix) keeps the rest in a map, so memory follows the
// trie nodes walked rather than 256 slots per set.
uint32_t Matcher::next_set(uint32_t set, uint8_t b) {
  const uint64_t key = uint64_t(set) << 8 | b;
  if (set < kDenseSets) {
    if (const uint32_t known = set_next_[key]; known != kUnknownSet) return known;
  } else if (auto it = set_next_sparse_.find(key); it != set_next_sparse_.end()) {
    return it->second;
  }
  scratch_.clear();
  step(set_leaves_, set_range_[set].first, set_range_[set].second, b, scratch_);
  const uint32_t next = scratch_.empty() ? kDeadSet : find_set(scratch_);
  if (set < kDenseSets) set_next_[key] = next;
  else set_next_sparse_.emplace(key, next);
  return next;
}

void Matcher::walk(const TokenTrie& trie, uint32_t node, uint32_t set, std::vector<uint64_t>& mask, uint32_t limit) {
  const auto& nodes = trie.nodes;
  for (uint32_t c = node + 1; c < nodes[node].subtree_end; c = nodes[c].subtree_end) {
    const uint8_t b = nodes[c].byte;
    if (!set_first_[set].has(b)) continue;
    const uint32_t next = next_set(set, b);
    if (next == kDeadSet) continue;
    if (const int32_t t = nodes[c].token; t >= 0) {
      if (limit != kNoLimit && set_rest_[next] == kUnknownSet)
        set_rest_[next] = min_rest(set_leaves_, set_range_[next].first, set_range_[next].second);
      if (limit == kNoLimit || set_rest_[next] <= limit) {
        mask[size_t(t) / 64] |= uint64_t(1) << (t % 64);
        if (!trie.same_bytes.empty()) {
          auto it = std::lower_bound(trie.same_bytes.begin(), trie.same_bytes.end(), std::make_pair(c, INT32_MIN));
          for (; it != trie.same_bytes.end() && it->first == c; ++it) mask[size_t(it->second) / 64] |= uint64_t(1) << (it->second % 64);
        }
      }
    }
    if (nodes[c].subtree_end > c + 1) walk(trie, c, next, mask, limit);
  }
}

// One string body and, besides it, only stacks that wait for the closing quote: then a
// token without '"' or '\' is allowed exactly when the body takes all of it.
bool Matcher::string_fast_path() const {
  int bodies = 0;
  for (uint32_t leaf : leaves_) {
    if (leaf == kAccept) continue;
    const Node& n = nodes_[leaf];
    const Elem& e = grammar_->elems[n.pos];
    if (e.kind == ElemKind::STRING_BODY) {
      ++bodies;
      continue;
    }
    ByteSet s = grammar_->byte_sets[e.index];
    s.remove('"');
    if (!s.empty()) return false;
  }
  return bodies == 1;
}

// Whether some token starts with `prefix` and goes on with a byte from `next_bytes`.
bool Matcher::has_extension(std::string_view prefix, const ByteSet& next_bytes) const {
  const auto& nodes = tokens_->trie().nodes;
  uint32_t node = 0;
  for (char c : prefix) {
    uint32_t child = node + 1;
    while (child < nodes[node].subtree_end && nodes[child].byte != uint8_t(c)) child = nodes[child].subtree_end;
    if (child >= nodes[node].subtree_end) return false;
    node = child;
  }
  for (uint32_t c = node + 1; c < nodes[node].subtree_end; c = nodes[c].subtree_end)
    if (next_bytes.has(nodes[c].byte)) return true;
  return false;
}

int32_t Matcher::forced_token() {
  constexpr size_t kMaxForcedBytes = 256;
  constexpr size_t kLookbackTokens = 4;
  if (!tokens_->encoder()) return -1;
  std::vector<uint32_t> cur = leaves_, next;
  std::string forced;
  ByteSet after;
  for (;;) {
    if (cur.empty() || cur.back() == kAccept) {
      after = ByteSet{};
      if (!cur.empty()) after = first_bytes(cur, 0, cur.size() - 1);
      break;
    }
    after = first_bytes(cur, 0, cur.size());
    int only = -1, count = 0;
    for (int w = 0; w < 4; ++w) count += __builtin_popcountll(after.bits[w]);
    if (count != 1 || forced.size() >= kMaxForcedBytes) break;
    for (int b = 0; b < 256 && only < 0; ++b)
      if (after.has(uint8_t(b))) only = b;
    next.clear();
    step(cur, 0, cur.size(), uint8_t(only), next);
    if (next.empty()) break;  // the byte is refused after all (a counted region's bounds)
    forced += char(only);
    cur.swap(next);
  }
  // Where the forced text starts with a marker, the marker's own token; forced text before
  // a marker is forced up to it.
  for (const auto& [id, text] : marker_tokens_) {
    if (forced.starts_with(text)) return id;
    if (const size_t at = forced.find(text); at != std::string::npos) {
      forced.resize(at);
      after = ByteSet{};
      after.add(uint8_t(text[0]));
    }
  }
  if (forced.empty()) return -1;
  const std::vector<int32_t> ids = tokens_->encoder()(forced);
  std::string spelled;
  for (int32_t id : ids) {
    if (id < 0 || size_t(id) >= tokens_->vocab_size()) return -1;
    spelled += tokens_->bytes(id);
  }
  if (spelled != forced || ids.empty()) return -1;  // e.g. forced text ending inside a character
  // Leave open the last tokens whose text could merge with what follows: the longest
  // suffix of the last few tokens' text that some token extends with an allowed byte.
  std::string tail;
  for (size_t i = ids.size() - std::min(ids.size(), kLookbackTokens); i < ids.size(); ++i) tail += tokens_->bytes(ids[i]);
  if (tail.size() > tokens_->max_token_bytes()) tail.erase(0, tail.size() - tokens_->max_token_bytes());
  size_t open_tokens = 0;
  for (size_t from = 0; from < tail.size(); ++from) {
    const std::string_view suffix = std::string_view(tail).substr(from);
    if (!has_extension(suffix, after)) continue;
    size_t covered = 0;
    while (open_tokens < ids.size() && covered < suffix.size()) covered += tokens_->bytes(ids[ids.size() - ++open_tokens]).size();
    break;
  }
  return open_tokens < ids.size() ? ids[0] : -1;
}

// A counted region's frame past minLength and farther from maxLength than a token, forced
// text and the most the region can still need: no check can fail within one mask, so every count there
// has the same mask (the state stays the same for the mask cache, as a plain format's does).
uint32_t Matcher::key_sub(const Node& n) const {
  const Elem& e = grammar_->elems[n.pos];
  if (e.kind != ElemKind::COUNTED || !(n.sub & kRegionFrame)) return n.sub;
  const Counted& c = grammar_->counted[e.index];
  const uint64_t chars = region_chars(n.sub);
  constexpr uint64_t kForcedLookahead = 512;  // forced_token looks up to 256 bytes ahead, and one more
  if (chars >= c.bounds.min && chars + tokens_->max_token_bytes() + kForcedLookahead + c.max_need <= c.bounds.max)
    return n.sub | ~31u;
  return n.sub;
}

void Matcher::fill_mask(std::vector<uint64_t>& mask, uint32_t finish_within) {
  const size_t words = (tokens_->vocab_size() + 63) / 64;
  if (mask.size() < words) mask.resize(words);
  std::fill(mask.begin(), mask.end(), 0);
  memo_.clear();
  // Far from the budget, no token can matter: one would have to add thousands of required
  // bytes (a minItems or minLength in the thousands) to reach it. Skip the per-token check.
  constexpr uint32_t kHorizon = 4096;
  if (finish_within != kNoLimit && finish_within >= add_lengths(min_rest(leaves_, 0, leaves_.size()), kHorizon))
    finish_within = kNoLimit;
  if (finish_within != kNoLimit) {
    compute_mask(mask, finish_within);
    return;
  }
  // The live nodes and the leaves are the whole state: equal keys, equal masks.
  key_.clear();
  for (size_t id = 1; id < nodes_.size(); ++id) key_.insert(key_.end(), {nodes_[id].pos, key_sub(nodes_[id]), nodes_[id].parent});
  key_.insert(key_.end(), leaves_.begin(), leaves_.end());
  for (const CachedMask& c : cache_)
    if (c.key == key_) {
      std::copy(c.mask.begin(), c.mask.end(), mask.begin());
      return;
    }
  compute_mask(mask, kNoLimit);
  constexpr size_t kCachedMasks = 4;
  if (cache_.size() < kCachedMasks) cache_.emplace_back();
  CachedMask& slot = cache_[cache_next_++ % kCachedMasks];
  slot.key = key_;
  slot.mask.assign(mask.begin(), mask.begin() + long(words));
}

void Matcher::compute_mask(std::vector<uint64_t>& mask, uint32_t finish_within) {
  const size_t keep = nodes_.size();
  // Forced text lies on every way to complete the value: its token is always progress.
  if (const int32_t forced = forced_token(); forced >= 0) {
    mask[size_t(forced) / 64] |= uint64_t(1) << (forced % 64);
    reset_intern(keep);
    return;
  }
  reset_sets();
  bool fast = string_fast_path();
  uint32_t body = 0;  // the string body's leaf
  for (uint32_t leaf : leaves_)
    if (leaf != kAccept && grammar_->elems[nodes_[leaf].pos].kind == ElemKind::STRING_BODY) body = leaf;
  if (fast && finish_within != kNoLimit) {
    // A bulk token stays inside the string and at worst ends mid-character: the bulk mask
    // holds only while that still leaves room to close the string and the rest.
    constexpr uint32_t kWorstClose = 4;  // the most string_body_min_close answers (after \u)
    fast = add_lengths(rest_of(body), kWorstClose) <= finish_within;
  }
  if (fast) {
    // The tokens without '"' or '\' that the body takes whole, and that start no more
    // characters than a maxLength leaves room for.
    const Node& n = nodes_[body];
    const uint32_t room = grammar_->string_bounds[grammar_->elems[n.pos].index].max - body_chars(n.sub);
    tokens_->body_mask_within(body_state(n.sub), room, mask);
    walk(tokens_->quote_trie(), 0, find_set(leaves_), mask, finish_within);
  } else {
    walk(tokens_->trie(), 0, find_set(leaves_), mask, finish_within);
  }
  for (const auto& [id, text] : marker_tokens_)
    if (size_t(id) / 64 < mask.size() && takes(text, finish_within)) mask[size_t(id) / 64] |= uint64_t(1) << (id % 64);
  memo_.clear();
  reset_intern(keep);  // drop the nodes the walk made
}

bool Matcher::advance(int32_t token) {
  if (token < 0 || size_t(token) >= tokens_->vocab_size()) return false;
  const std::string& bytes = tokens_->bytes(token);
  if (bytes.empty())  // an added token: only a grammar's marker goes on
    for (const auto& [id, text] : marker_tokens_)
      if (id == token) return advance_bytes(text);
  return !bytes.empty() && advance_bytes(bytes);
}

bool Matcher::advance_bytes(std::string_view bytes) {
  std::vector<uint32_t> cur = leaves_, next;
  for (char c : bytes) {
    next.clear();
    step(cur, 0, cur.size(), uint8_t(c), next);
    if (next.empty()) {
      compact();
      return false;
    }
    cur.swap(next);
  }
  leaves_ = std::move(cur);
  compact();
  return true;
}

bool Matcher::accepting() const { return !leaves_.empty() && leaves_.back() == kAccept; }
bool Matcher::finished() const { return accepting() && leaves_.size() == 1; }

// Keeps only the nodes the current stacks use. A parent is always interned before its
// children, so renumbering in id order keeps parents first.
void Matcher::compact() {
  std::vector<uint32_t> live;
  std::vector<uint8_t> seen(nodes_.size(), 0);
  for (uint32_t leaf : leaves_)
    for (uint32_t id = leaf; id != kAccept && id != 0 && !seen[id]; id = nodes_[id].parent) {
      seen[id] = 1;
      live.push_back(id);
    }
  std::sort(live.begin(), live.end());
  std::vector<uint32_t> new_id(nodes_.size(), 0);
  std::vector<Node> kept{{0, 0, 0}};
  for (uint32_t id : live) {
    new_id[id] = uint32_t(kept.size());
    Node n = nodes_[id];
    n.parent = new_id[n.parent];
    kept.push_back(n);
  }
  for (uint32_t& leaf : leaves_)
    if (leaf != kAccept) leaf = new_id[leaf];
  std::sort(leaves_.begin(), leaves_.end());
  nodes_ = std::move(kept);
  reset_intern(nodes_.size());
}

}  // namespace spark::constrain
