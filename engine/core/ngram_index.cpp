// ngram_index.cpp — the per-sequence n-gram maps behind prompt-lookup drafts.
#include "engine/core/ngram_index.h"

#include <algorithm>

#include "engine/util/check.h"
#include "engine/util/splitmix.h"

namespace spark {

namespace {

// The hashes of the n-grams ending at `end`, n = 1..max_n (fewer near the start), read
// backwards so that each longer one extends the shorter: out[n - 1].
void suffix_hashes(std::span<const int32_t> tokens, size_t end, int max_n, std::vector<uint64_t>& out) {
  out.clear();
  uint64_t h = 0x6a09e667f3bcc909ULL;
  for (int n = 1; n <= max_n && size_t(n) <= end + 1; ++n) {
    h = splitmix64(h ^ static_cast<uint32_t>(tokens[end + 1 - size_t(n)]));
    out.push_back(h);
  }
}

}  // namespace

NgramIndex::NgramIndex(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  SPARK_CHECK(min_n >= 1 && min_n <= max_n, "n-gram lengths must satisfy 1 <= min <= max");
  last_end_.resize(size_t(max_n - min_n + 1));
}

void NgramIndex::extend(std::span<const int32_t> tokens) {
  SPARK_CHECK(tokens.size() >= indexed_, "an n-gram index only grows");
  std::vector<uint64_t> hashes;
  // An n-gram is recorded once a token follows it: ends up to tokens.size() - 2.
  for (; indexed_ + 1 < tokens.size(); ++indexed_) {
    suffix_hashes(tokens, indexed_, max_n_, hashes);
    for (int n = min_n_; n <= int(hashes.size()); ++n) last_end_[size_t(n - min_n_)][hashes[size_t(n - 1)]] = int64_t(indexed_);
  }
}

std::vector<int32_t> NgramIndex::propose(std::span<const int32_t> tokens, int k) const {
  std::vector<int32_t> drafts;
  if (k <= 0 || tokens.empty()) return drafts;
  SPARK_CHECK(indexed_ + 1 >= tokens.size(), "propose before extend");
  const size_t last = tokens.size() - 1;
  std::vector<uint64_t> hashes;
  suffix_hashes(tokens, last, max_n_, hashes);
  for (int n = int(hashes.size()); n >= min_n_; --n) {
    const auto& map = last_end_[size_t(n - min_n_)];
    auto it = map.find(hashes[size_t(n - 1)]);
    if (it == map.end()) continue;
    const size_t end = size_t(it->second);
    if (!std::equal(tokens.begin() + std::ptrdiff_t(end + 1 - size_t(n)), tokens.begin() + std::ptrdiff_t(end + 1),
                    tokens.begin() + std::ptrdiff_t(last + 1 - size_t(n))))
      continue;  // a hash collision
    // Copy what followed. Past the context's end the source runs on into the drafts
    // themselves: the context continued by the drafts repeats with period last - end.
    for (int i = 0; i < k; ++i) {
      const size_t src = end + 1 + size_t(i);
      drafts.push_back(src <= last ? tokens[src] : drafts[src - last - 1]);
    }
    return drafts;
  }
  return drafts;
}

}  // namespace spark
