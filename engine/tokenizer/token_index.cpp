// token_index.cpp — open-addressing string index with linear probing.
#include "engine/tokenizer/token_index.h"

#include <cstring>

namespace spark {

uint64_t hash_bytes(std::string_view s) {
  // 64-bit multiply-xorshift over 8-byte words; tokens are short, so this is a few cycles.
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (s.size() * 0xff51afd7ed558ccdULL);
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  if (i < s.size()) {
    uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0x94d049bb133111ebULL;
  }
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 32);
}

void TokenIndex::reserve(size_t n) {
  spans_.reserve(n);
  ids_.reserve(n);
  arena_.reserve(n * 8);
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  if (cap > slots_.size()) {
    std::vector<uint64_t> old;
    old.swap(slots_);
    slots_.assign(cap, 0);
    mask_ = cap - 1;
    for (uint64_t s : old) {
      if (!s) continue;
      uint64_t i = (s >> 32) & mask_;
      while (slots_[i]) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
}

void TokenIndex::grow() { reserve(slots_.empty() ? 16 : slots_.size()); }

int32_t TokenIndex::find_hashed(std::string_view s, uint64_t h) const {
  if (slots_.empty()) return -1;
  const uint64_t h32 = uint32_t(h);
  for (uint64_t i = h32 & mask_;; i = (i + 1) & mask_) {
    uint64_t slot = slots_[i];
    if (!slot) return -1;
    if ((slot >> 32) != h32) continue;
    size_t e = size_t(uint32_t(slot) - 1);
    const Span& sp = spans_[e];
    if (sp.len == s.size() && std::memcmp(arena_.data() + sp.off, s.data(), s.size()) == 0) return ids_[e];
  }
}

bool TokenIndex::insert(std::string_view s, int32_t id) {
  if ((ids_.size() + 1) * 2 > slots_.size()) grow();
  uint64_t h = hash_bytes(s);
  if (find_hashed(s, h) >= 0) return false;
  const uint64_t h32 = uint32_t(h);
  uint64_t i = h32 & mask_;
  while (slots_[i]) i = (i + 1) & mask_;
  slots_[i] = (h32 << 32) | uint64_t(ids_.size() + 1);
  spans_.push_back({uint32_t(arena_.size()), uint32_t(s.size())});
  ids_.push_back(id);
  arena_.append(s);
  return true;
}

}  // namespace spark
