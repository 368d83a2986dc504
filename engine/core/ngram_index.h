// ngram_index.h — prompt lookup for one sequence: where the last few tokens of its
// context occurred before, so that the tokens which followed them there can be proposed
// as drafts. Incremental: each new token adds one entry per n-gram length, so a step
// costs O(max_n^2) however long the context is.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace spark {

class NgramIndex {
 public:
  // n-grams of min_n..max_n tokens (1 <= min_n <= max_n).
  NgramIndex(int min_n, int max_n);

  // Indexes the tokens appended since the last call. `tokens` is the whole context
  // (prompt, then output); it only ever grows.
  void extend(std::span<const int32_t> tokens);

  // Up to k drafts for what follows `tokens` (extend()ed first): for the longest n
  // (max_n down to min_n) whose last-n-token suffix occurred earlier, the tokens that
  // followed its most recent earlier occurrence. When that occurrence overlaps the
  // suffix (a repeating pattern), the copy runs on through the drafts themselves, so a
  // period-p loop yields k drafts. Empty when no suffix occurred before.
  std::vector<int32_t> propose(std::span<const int32_t> tokens, int k) const;

  size_t indexed() const { return indexed_; }

 private:
  int min_n_, max_n_;
  size_t indexed_ = 0;  // n-grams ending before this position are in the maps
  // Per length n - min_n: hash of an n-gram -> the last position it ended at that has a
  // following token. A hash collision costs only a draft that verification rejects, and
  // propose() compares the tokens anyway.
  std::vector<std::unordered_map<uint64_t, int64_t>> last_end_;
};

}  // namespace spark
