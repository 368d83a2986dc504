// utf8.h — UTF-8 decoding, encoding and lossy repair shared by the tokenizer stages.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace spark::utf8 {

inline constexpr char32_t REPLACEMENT = 0xFFFD;

// Byte length of the UTF-8 sequence that starts with `lead` (1 for stray bytes).
inline int seq_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// Decodes the code point at s[i] of a string already known to be valid UTF-8 and advances i.
inline char32_t next(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) { ++i; return c; }
  int n = seq_len(c);
  if (i + n > s.size()) { ++i; return REPLACEMENT; }
  char32_t cp = c & (0x3F >> (n - 1));
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void append(std::string& out, char32_t cp);
inline std::string encode(char32_t cp) { std::string s; append(s, cp); return s; }

// Length of the longest prefix of `s` that is well-formed UTF-8.
size_t valid_prefix(std::string_view s);
inline bool is_valid(std::string_view s) { return valid_prefix(s) == s.size(); }

// Replaces every ill-formed subsequence with U+FFFD using the "maximal subpart" rule,
// which is what both Rust's String::from_utf8_lossy and Python's errors="replace" do.
std::string repair(std::string_view s);
// Like repair(), but returns `s` untouched (no copy) when it is already valid.
inline std::string repair_copy(std::string_view s) { return is_valid(s) ? std::string(s) : repair(s); }

// Number of code points in valid UTF-8.
size_t count_chars(std::string_view s);

}  // namespace spark::utf8
