// token_table.h — what the constraint matcher needs to know about a vocabulary, computed
// once per tokenizer: every token's bytes, a byte trie over them (so one walk decides all
// tokens sharing a prefix, and a failed byte prunes its whole subtree), and bulk masks for
// the inside of JSON strings (most of the vocabulary there is decided without a walk).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace spark {
class Tokenizer;
}

namespace spark::constrain {

// The JSON string-body automaton (see string_body.cpp): UTF-8 validity and escapes.
inline constexpr uint8_t kStringStates = 14;
inline constexpr uint8_t kStringBoundary = 0;  // between characters: a byte here starts one
inline constexpr uint8_t kStringDead = 0xFF;
uint8_t string_body_step(uint8_t state, uint8_t byte);

// A byte trie in depth-first order: node i's children start at i + 1, and the subtree of
// node i ends (exclusive) at subtree_end. Node 0 is the root (no byte).
struct TokenTrie {
  struct Node {
    uint32_t subtree_end = 0;
    int32_t token = -1;  // a token whose bytes end here, or -1
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;
  // Other tokens with the same bytes as nodes[i].token: (node, token), sorted by node.
  std::vector<std::pair<uint32_t, int32_t>> same_bytes;

  static TokenTrie build(const std::vector<std::string>& token_bytes, const std::vector<int32_t>& ids);
};

class TokenTable {
 public:
  // token_bytes[id] = the bytes the token decodes to; empty = never allowed (special
  // tokens, ids without text).
  using Encoder = std::function<std::vector<int32_t>(const std::string& text)>;
  // `encode` (optional) is the tokenizer's own encoding of text, for forced text (see
  // Matcher::fill_mask); the tokenizer behind it must outlive the table.
  // `markup` (optional): the text of added tokens (<tool_call>, <|message|>), which are
  // never allowed inside a constrained value (but a grammar's own markers, Grammar::markers)
  // and open one (tool_trigger.h).
  explicit TokenTable(std::vector<std::string> token_bytes, Encoder encode = {},
                      std::unordered_map<int32_t, std::string> markup = {});
  static std::shared_ptr<const TokenTable> from_tokenizer(const Tokenizer& tokenizer);

  size_t vocab_size() const { return bytes_.size(); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  // What a token writes in the output: its bytes, or an added token's text.
  const std::string& text(int32_t id) const;
  const TokenTrie& trie() const { return all_; }
  // Tokens holding a '"' or '\': the ones a string body cannot decide in bulk.
  const TokenTrie& quote_trie() const { return quoted_; }
  // Per string-body state: tokens with no '"' or '\' that the body accepts whole from it.
  const std::vector<uint64_t>& body_mask(uint8_t state) const { return body_masks_[state]; }
  // body_mask(state) less the tokens that start more than `room` characters (a string with
  // maxLength), written over the first words of `mask`.
  void body_mask_within(uint8_t state, uint32_t room, std::vector<uint64_t>& mask) const;
  const Encoder& encoder() const { return encode_; }
  // The added tokens' texts by id (the `markup` the table was made with).
  const std::unordered_map<int32_t, std::string>& markup() const { return markup_; }
  size_t max_token_bytes() const { return max_token_bytes_; }

 private:
  std::vector<std::string> bytes_;
  Encoder encode_;
  std::unordered_map<int32_t, std::string> markup_;
  size_t max_token_bytes_ = 0;
  TokenTrie all_, quoted_;
  std::array<std::vector<uint64_t>, kStringStates> body_masks_;
  // Per string-body state, body_mask's tokens by how many characters each starts, so a
  // bounded string's mask is a prefix of a sorted list rather than a walk. Where the prefix
  // and the rest are both long, its mask is kept whole.
  struct BodyByLength {
    std::vector<int32_t> tokens;               // fewest characters first
    std::vector<uint32_t> upto;                // upto[k]: how many start at most k characters
    std::vector<std::vector<uint64_t>> masks;  // masks[k], or empty where a side is short
  };
  std::array<BodyByLength, kStringStates> by_length_;
};

}  // namespace spark::constrain
