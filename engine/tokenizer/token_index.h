// token_index.h — a compact string -> id hash index over one character arena, built fast for
// vocabularies of a few hundred thousand tokens (no per-token allocation).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spark {

uint64_t hash_bytes(std::string_view s);

class TokenIndex {
 public:
  void reserve(size_t n);
  // Adds `s` -> id; a string already present keeps its first id (returns false).
  bool insert(std::string_view s, int32_t id);
  // The id of `s`, or -1.
  int32_t find(std::string_view s) const { return find_hashed(s, hash_bytes(s)); }
  int32_t find_hashed(std::string_view s, uint64_t h) const;
  size_t size() const { return ids_.size(); }
  std::string_view key(size_t entry) const {
    return std::string_view(arena_).substr(spans_[entry].off, spans_[entry].len);
  }
  int32_t id(size_t entry) const { return ids_[entry]; }

 private:
  void grow();
  struct Span {
    uint32_t off, len;
  };
  std::string arena_;
  std::vector<Span> spans_;
  std::vector<int32_t> ids_;
  // Each slot packs the entry's 32-bit hash (high half) and entry index + 1 (low half, 0 when
  // empty), so most probes are decided without touching the entry.
  std::vector<uint64_t> slots_;
  uint64_t mask_ = 0;
};

}  // namespace spark
