// precompiled_charsmap.h — SentencePiece's compiled normalization rules (the `precompiled_charsmap`
// of a Unigram tokenizer.json or a T5 GGUF): a double-array trie from UTF-8 byte strings to
// offsets into a blob of NUL-terminated replacement strings, applied the way Hugging Face's
// `Precompiled` normalizer applies it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spark {

class PrecompiledCharsmap {
 public:
  // `blob` is the decoded charsmap: u32 little-endian trie size in bytes, the trie's u32 units,
  // then the replacement strings. Throws InputError naming `field` when it is malformed.
  PrecompiledCharsmap(std::string_view blob, const std::string& field);

  // Rewrites `text` (valid UTF-8) by the rules; see the .cpp for the grapheme quirk it keeps.
  void normalize(std::string& text) const;

  // The replacement of the shortest key that is a prefix of `chunk`; nullopt when none is.
  std::optional<std::string_view> transform(std::string_view chunk) const;

 private:
  // transform() of one ASCII character, as a span of replacements_ (offset -1: no rule).
  struct AsciiRule {
    int32_t offset = -1, length = 0;
  };
  std::vector<uint32_t> units_;
  std::string replacements_;
  AsciiRule ascii_[128];  // precomputed: most text is ASCII
};

// Standard base64 (RFC 4648, padded) as tokenizer.json stores binary blobs; throws InputError
// naming `field` on any other character or a bad length.
std::string decode_base64(std::string_view text, const std::string& field);

}  // namespace spark
