// decoder.h — decoders of tokenizer.json (ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip, WordPiece, BPEDecoder, CTC, Sequence): token strings back to text, and what part
// of that text later tokens can no longer change (for streaming).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spark {

// The part of a decoder's output that no token appended to its input can change: strings
// [0, tokens) stay as they are, and string `tokens` (when `bytes` > 0) keeps its first
// `bytes` bytes. A chain's raw input, all of whose tokens are known, is {count, 0}.
struct StablePrefix {
  size_t tokens = 0;
  size_t bytes = 0;
};

// Facts gathered along a decoder chain, in order, that decide whether streaming may decode
// a short window ([context token, new tokens]) instead of the whole sequence; the
// conditions this promises are spelled out in detokenizer.cpp.
struct WindowCheck {
  bool exact = true;            // every decoder so far keeps a window's text exact
  bool fused = false;           // an earlier decoder joined all strings into one
  bool stripped_fused = false;  // a Strip already ran on the joined string
  bool rewrites = false;        // an earlier decoder may have made or unmade a <0xNN> string
  bool drops = false;           // an earlier decoder may remove strings, shifting positions
  bool first_differs = false;   // an earlier decoder treats the first string unlike the rest
  bool byte_fallback = false;   // <0xNN> tokens are decoded jointly with their neighbours
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings; the caller concatenates the result.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // decode_chain for a sequence that more tokens may extend: `stable` describes `tokens`
  // on the way in and the result on the way out. It may understate, never overstate.
  virtual void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const = 0;
  virtual void check_window(WindowCheck& check) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec);

// Building blocks for GGUF-described tokenizers.
std::unique_ptr<Decoder> make_byte_level_decoder();
std::unique_ptr<Decoder> make_sentencepiece_decoder(bool strip_leading_space);

// Parses a "<0xNN>" byte token; -1 when `token` is not one.
int parse_byte_token(const std::string& token);

}  // namespace spark
