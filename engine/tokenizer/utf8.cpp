// utf8.cpp — UTF-8 validation and lossy repair with the Unicode "maximal subpart" rule.
#include "engine/tokenizer/utf8.h"

namespace spark::utf8 {

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Length of the well-formed sequence at s[i], or 0 with `bad` set to the number of bytes
// forming the maximal ill-formed subpart (at least 1). Follows Table 3-7 of the Unicode
// standard, so overlongs, surrogates and values past U+10FFFF are rejected.
size_t check_one(std::string_view s, size_t i, size_t& bad) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = at(i);
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 2;
  else if (c == 0xE0) { need = 3; lo = 0xA0; }
  else if (c >= 0xE1 && c <= 0xEC) need = 3;
  else if (c == 0xED) { need = 3; hi = 0x9F; }
  else if (c >= 0xEE && c <= 0xEF) need = 3;
  else if (c == 0xF0) { need = 4; lo = 0x90; }
  else if (c >= 0xF1 && c <= 0xF3) need = 4;
  else if (c == 0xF4) { need = 4; hi = 0x8F; }
  else { bad = 1; return 0; }
  size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= s.size()) { bad = k; return 0; }
    unsigned char b = at(i + k);
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) { bad = k; return 0; }
  }
  return need;
}

}  // namespace

size_t valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= s.size()) break;
    size_t bad = 0;
    size_t n = check_one(s, i, bad);
    if (n == 0) return i;
    i += n;
  }
  return s.size();
}

std::string repair(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0;
    size_t n = check_one(s, i, bad);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      append(out, REPLACEMENT);
      i += bad;
    }
  }
  return out;
}

size_t count_chars(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace spark::utf8
