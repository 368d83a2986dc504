// decoder.h — decoders of tokenizer.json (ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip, WordPiece, BPEDecoder, CTC, Sequence): token strings back to text.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spark {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings; the caller concatenates the result.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // True when the decoder turns <0xNN> tokens into bytes (their text depends on neighbours).
  virtual bool has_byte_fallback() const { return false; }
};

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec);

// Building blocks for GGUF-described tokenizers.
std::unique_ptr<Decoder> make_byte_level_decoder();
std::unique_ptr<Decoder> make_sentencepiece_decoder(bool strip_leading_space);

// Parses a "<0xNN>" byte token; -1 when `token` is not one.
int parse_byte_token(const std::string& token);

}  // namespace spark
