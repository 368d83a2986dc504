// matcher.h — the incremental matcher of one constrained sequence: which tokens may come
// next (a bitmask over the vocabulary), and advancing on the token that was sampled.
//
// State: the set of pushdown stacks the grammar can be in after the bytes so far (usually
// one). Stacks are hash-consed nodes (position, string-body state, parent), so equal
// stacks are one node and a set never grows with ambiguity it has already seen. A mask is
// one depth-first walk of the vocabulary's byte trie, advancing the stack set a byte at a
// time (each set's step by a byte taken once per mask) and skipping every subtree whose
// first byte no stack accepts; inside a JSON string the tokens without '"' or '\' come from
// a precomputed mask (by characters, for maxLength) and only the few others are walked.
//
// Forced text: where the grammar allows one byte only, then one only again, and so on, the
// text up to the next choice is fixed. There the mask is only the first token of the
// tokenizer's own encoding of that text (its canonical spelling: `{"` rather than `{` then
// `"`), unless the encoding's last tokens could merge with what follows the forced text
// (then they are left open). This is llguidance's rule, and it keeps the model on the
// spellings it was trained on.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/constrain/grammar.h"
#include "engine/constrain/token_table.h"

namespace spark::constrain {

class Matcher {
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTable> tokens);

  static constexpr uint32_t kNoLimit = 0xFFFFFFFFu;
  // Sets bit t of `mask` (ceil(vocab / 64) words, at least the table's vocabulary; other
  // bits cleared) for every token the grammar allows next. End-of-sequence tokens are the
  // caller's: allowed exactly when accepting().
  // With `finish_within`, only the tokens after which some `finish_within` more bytes
  // complete the value: a sequence with n tokens left passes n - 1, and since every later
  // token can bring the value at least one byte closer (byte-level vocabularies spell each
  // byte), its output is a complete value when the budget runs out, never a cut one (short
  // of one token adding over 4,096 required bytes while the budget is still that far off).
  void fill_mask(std::vector<uint64_t>& mask, uint32_t finish_within = kNoLimit);
  // The fewest bytes that complete the value from here (0 when accepting).
  uint32_t min_bytes_to_finish();
  // Consumes a token's bytes; false (and no change) when the grammar does not allow them.
  bool advance(int32_t token);
  bool advance_bytes(std::string_view bytes);
  // The bytes so far form a complete value.
  bool accepting() const;
  // Complete, and no further byte is allowed: only end-of-sequence remains.
  bool finished() const;

 private:
  struct Node {
    uint32_t pos;     // next element to match (for a parent frame: where to return)
    uint32_t sub;     // when elems[pos] is STRING_BODY: the automaton's state in the low
                      // kBodyStateBits, and above them (bounded bodies only) the characters
                      // started so far
    uint32_t parent;  // 0 = bottom of the stack
  };
  static constexpr uint32_t kAccept = 0xFFFFFFFFu;
  static constexpr uint32_t kBodyStateBits = 4;
  static constexpr uint32_t kDeadBody = 0xFFFFFFFFu;
  static uint8_t body_state(uint32_t sub) { return uint8_t(sub & ((1u << kBodyStateBits) - 1)); }
  static uint32_t body_chars(uint32_t sub) { return sub >> kBodyStateBits; }
  // A string body's `sub` after byte b (kDeadBody when refused), the bytes it accepts next,
  // and whether it may close here.
  uint32_t body_step(const Elem& body, uint32_t sub, uint8_t b) const;
  const ByteSet& body_first(const Elem& body, uint32_t sub) const;
  bool body_may_close(const Elem& body, uint32_t sub) const;

  static constexpr uint32_t kRegionFrame = 1;
  static uint32_t region_sub(uint8_t state, uint32_t chars) { return kRegionFrame | uint32_t(state) << 1 | chars << 5; }
  static uint8_t region_state(uint32_t sub) { return uint8_t((sub >> 1) & 15); }
  static uint32_t region_chars(uint32_t sub) { return sub >> 5; }
  // Byte b taken by `leaf`, a BYTES leaf inside a counted region: the region's frame
  // counts it, and the byte is refused where the region could then not finish within its
  // bounds.
  void region_step(uint32_t leaf, uint8_t b, std::vector<uint32_t>& out);
  uint32_t region_rest(uint32_t node);
  uint32_t key_sub(const Node& n) const;  // a node's sub as the mask cache compares it

  uint32_t intern(uint32_t pos, uint32_t sub, uint32_t parent);
  uint32_t frame_after(uint32_t pos, uint32_t parent);
  void expand(uint32_t node, std::vector<uint32_t>& out, int depth);
  // Appends the leaves after byte b from leaves[begin, end) of `from` to `out`, deduplicated.
  void step(const std::vector<uint32_t>& from, size_t begin, size_t end, uint8_t b, std::vector<uint32_t>& out);
  ByteSet first_bytes(const std::vector<uint32_t>& leaves, size_t begin, size_t end) const;
  int32_t forced_token();  // -1 when nothing is forced
  bool has_extension(std::string_view prefix, const ByteSet& next_bytes) const;
  void walk(const TokenTrie& trie, uint32_t node, uint32_t set, std::vector<uint64_t>& mask, uint32_t limit);
  // The walk's stack sets (matcher.cpp): numbered by content, with their steps by byte.
  static constexpr uint32_t kUnknownSet = 0xFFFFFFFFu;
  static constexpr uint32_t kDeadSet = 0xFFFFFFFEu;
  static constexpr uint32_t kDenseSets = 1024;
  void reset_sets();
  uint32_t find_set(const std::vector<uint32_t>& leaves);
  uint32_t next_set(uint32_t set, uint8_t b);
  // Fewest bytes to complete the value from a stack (rest_of) or the best of a leaf set;
  // memoized by node id in memo_, valid while no node is dropped.
  uint32_t rest_of(uint32_t node);
  uint32_t min_rest(const std::vector<uint32_t>& leaves, size_t begin, size_t end);
  bool string_fast_path() const;
  // fill_mask's work, without the cache: the forced token, or the trie walk.
  void compute_mask(std::vector<uint64_t>& mask, uint32_t finish_within);
  void reset_intern(size_t keep_nodes);
  void compact();

  // The added tokens whose text is one of the grammar's markers (Grammar::markers), with it.
  std::vector<std::pair<int32_t, std::string>> marker_tokens_;
  // Whether the current stacks take `text` whole, within `finish_within` bytes of the end.
  bool takes(std::string_view text, uint32_t finish_within);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTable> tokens_;
  std::vector<Node> nodes_;       // arena; nodes_[0] is unused (0 = no parent)
  std::vector<uint32_t> leaves_;  // current stacks, sorted (kAccept last when accepting)
  std::vector<uint32_t> scratch_; // a step's leaves, before they are numbered as a set
  std::vector<uint32_t> set_leaves_;                     // every set's leaves, back to back
  std::vector<std::pair<uint32_t, uint32_t>> set_range_; // set -> its [begin, end) there
  std::vector<ByteSet> set_first_;                       // set -> the bytes it accepts
  std::vector<uint32_t> set_next_;                       // set * 256 + byte -> next set
  std::unordered_map<uint64_t, uint32_t> set_next_sparse_; // the same past kDenseSets sets
  std::vector<uint32_t> set_rest_;                       // set -> fewest bytes to finish
  std::unordered_multimap<uint64_t, uint32_t> set_by_hash_;
  std::vector<uint32_t> table_;   // intern hash table of node ids (0 = empty)
  std::vector<uint32_t> table_gen_;
  std::vector<uint32_t> memo_;
  uint32_t gen_ = 1;
  size_t table_used_ = 0;
  // The last few masks computed without a budget, by state: a state that comes back (the
  // stacks after each digit of a number, or each token of a plain string) costs a lookup.
  struct CachedMask {
    std::vector<uint32_t> key;  // the live nodes (pos, sub, parent) and the leaves
    std::vector<uint64_t> mask;
  };
  std::vector<CachedMask> cache_;
  size_t cache_next_ = 0;
  std::vector<uint32_t> key_;
};

}  // namespace spark::constrain
