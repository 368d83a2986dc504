// byte_level.cpp — the byte <-> character tables of byte-level BPE.
#include "engine/tokenizer/byte_level.h"

#include <vector>

#include "engine/tokenizer/utf8.h"

namespace spark::byte_level {

namespace {

struct Tables {
  std::array<std::string, 256> chars;
  std::vector<int> bytes;  // indexed by code point, up to U+0143
  Tables() {
    // Printable Latin-1 bytes stand for themselves; the rest are shifted to U+0100 onwards,
    // in byte order, so every byte has a visible, non-space character.
    std::array<char32_t, 256> cp{};
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) cp[b] = direct[b] ? static_cast<char32_t>(b) : next++;
    bytes.assign(next, -1);
    for (int b = 0; b < 256; ++b) {
      chars[b] = utf8::encode(cp[b]);
      bytes[cp[b]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& char_of(uint8_t b) { return tables().chars[b]; }

int byte_of(char32_t cp) {
  const auto& t = tables().bytes;
  return cp < t.size() ? t[cp] : -1;
}

std::string encode(std::string_view raw) {
  const auto& t = tables();
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) out += t.chars[c];
  return out;
}

std::optional<std::string> decode(std::string_view mapped) {
  std::string out;
  out.reserve(mapped.size());
  size_t i = 0;
  while (i < mapped.size()) {
    int b = byte_of(utf8::next(mapped, i));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace spark::byte_level
