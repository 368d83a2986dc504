// precompiled_charsmap.cpp — reads SentencePiece's precompiled_charsmap and normalizes text with
// it. Every trie step is bounds-checked: the charsmap comes from the model file, and a corrupt
// one must end in an InputError at load or a missed rule, never a read out of bounds.
#include "engine/tokenizer/precompiled_charsmap.h"

#include <utf8proc.h>

#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"

namespace spark {

namespace {

// A double-array unit (darts-clone's layout, which SentencePiece writes): the low byte is the
// label of the edge into a node, bit 8 says a value hangs below it, bits 10.. hold the XOR
// offset to the children (scaled by 256 when bit 9 is set); a value unit keeps bit 31 set so
// no label can match it, and its low 31 bits are the value.
uint32_t unit_offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }
uint32_t unit_label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
bool unit_has_leaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
uint32_t unit_value(uint32_t unit) { return unit & ((1u << 31) - 1); }

int base64_digit(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::string decode_base64(std::string_view text, const std::string& field) {
  if (text.size() % 4 != 0)
    throw InputError(field + " is not base64: its length " + std::to_string(text.size()) + " is not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int pad = 0;
    uint32_t group = 0;
    for (size_t k = 0; k < 4; ++k) {
      unsigned char c = static_cast<unsigned char>(text[i + k]);
      int d = base64_digit(c);
      // '=' may only close the last group, as its last one or two characters.
      if (c == '=' && last && k >= 2 && (k == 3 || text[i + 3] == '=')) {
        ++pad;
        d = 0;
      } else if (d < 0 || pad > 0) {
        throw InputError(field + " is not base64: unexpected character at offset " + std::to_string(i + k));
      }
      group = (group << 6) | uint32_t(d);
    }
    out.push_back(char(group >> 16));
    if (pad < 2) out.push_back(char((group >> 8) & 0xFF));
    if (pad < 1) out.push_back(char(group & 0xFF));
  }
  return out;
}

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, const std::string& field) {
  if (blob.size() < 4)
    throw InputError(field + " is malformed: " + std::to_string(blob.size()) + " bytes, shorter than its 4-byte header");
  const uint32_t trie_bytes = uint32_t(uint8_t(blob[0])) | uint32_t(uint8_t(blob[1])) << 8 |
                              uint32_t(uint8_t(blob[2])) << 16 | uint32_t(uint8_t(blob[3])) << 24;
  if (trie_bytes == 0) throw InputError(field + " is malformed: its trie is empty");
  if (trie_bytes % 4 != 0)
    throw InputError(field + " is malformed: trie size " + std::to_string(trie_bytes) + " is not a multiple of 4");
  if (trie_bytes > blob.size() - 4)
    throw InputError(field + " is malformed: trie size " + std::to_string(trie_bytes) + " runs past the end (" +
                     std::to_string(blob.size() - 4) + " bytes follow the header)");
  units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < units_.size(); ++i) {
    const char* p = blob.data() + 4 + i * 4;
    units_[i] = uint32_t(uint8_t(p[0])) | uint32_t(uint8_t(p[1])) << 8 | uint32_t(uint8_t(p[2])) << 16 |
                uint32_t(uint8_t(p[3])) << 24;
  }
  replacements_.assign(blob.substr(4 + trie_bytes));
  // Hugging Face refuses a charsmap whose strings are not UTF-8; so do we, which also keeps
  // every replacement that starts on a character boundary valid UTF-8.
  if (!utf8::is_valid(replacements_)) throw InputError(field + " is malformed: its replacement strings are not UTF-8");
  for (int c = 0; c < 128; ++c) {
    const char ch = char(c);
    auto r = transform(std::string_view(&ch, 1));
    ascii_[c] = r ? AsciiRule{int32_t(r->data() - replacements_.data()), int32_t(r->size())} : AsciiRule{};
  }
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  // The first value found is the one for the shortest key: Hugging Face takes that one, not the
  // longest match SentencePiece's own normalizer would.
  size_t pos = unit_offset(units_[0]);
  for (unsigned char c : chunk) {
    if (c == 0) break;
    pos ^= c;
    if (pos >= units_.size()) return std::nullopt;
    const uint32_t unit = units_[pos];
    if (unit_label(unit) != c) return std::nullopt;
    pos ^= unit_offset(unit);
    if (!unit_has_leaf(unit)) continue;
    if (pos >= units_.size()) return std::nullopt;
    const size_t begin = unit_value(units_[pos]);
    if (begin > replacements_.size()) return std::nullopt;
    if (begin < replacements_.size() && (uint8_t(replacements_[begin]) & 0xC0) == 0x80) return std::nullopt;
    size_t end = replacements_.find('\0', begin);
    if (end == std::string::npos) end = replacements_.size();
    return std::string_view(replacements_).substr(begin, end - begin);
  }
  return std::nullopt;
}

void PrecompiledCharsmap::normalize(std::string& text) const {
  // Hugging Face's reading of the rules, kept for exactness: the text is cut into extended
  // grapheme clusters; a cluster shorter than 6 bytes is first looked up whole, and if a key
  // is a prefix of it the WHOLE cluster becomes that key's replacement (so "\r\n" is one unit,
  // and what follows the key in the cluster is dropped). Otherwise each character is looked
  // up on its own and kept when no key is a prefix of it.
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    // Between two ASCII characters there is always a cluster break, except inside CR LF.
    if (c < 0x80 && (i + 1 == n || (static_cast<unsigned char>(text[i + 1]) < 0x80 && !(c == '\r' && text[i + 1] == '\n')))) {
      const AsciiRule& rule = ascii_[c];
      if (rule.offset >= 0) out.append(replacements_, size_t(rule.offset), size_t(rule.length));
      else out.push_back(char(c));
      ++i;
      continue;
    }
    size_t j = i;
    char32_t prev = utf8::next(text, j);
    utf8proc_int32_t state = 0;
    while (j < n) {
      size_t k = j;
      const char32_t cp = utf8::next(text, k);
      if (utf8proc_grapheme_break_stateful(utf8proc_int32_t(prev), utf8proc_int32_t(cp), &state)) break;
      prev = cp;
      j = k;
    }
    const std::string_view cluster = std::string_view(text).substr(i, j - i);
    if (cluster.size() < 6) {
      if (auto r = transform(cluster)) {
        out.append(*r);
        i = j;
        continue;
      }
    }
    for (size_t p = 0; p < cluster.size();) {
      size_t q = p;
      utf8::next(cluster, q);
      const std::string_view ch = cluster.substr(p, q - p);
      if (auto r = transform(ch)) out.append(*r);
      else out.append(ch);
      p = q;
    }
    i = j;
  }
  text.swap(out);
}

}  // namespace spark
