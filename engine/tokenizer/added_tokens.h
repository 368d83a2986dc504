// added_tokens.h — added and special tokens, matched in the text before the model runs
// (leftmost-longest, with special / lstrip / rstrip / single_word / normalized semantics).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/pre_tokenizer.h"

namespace spark {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
  // What decode() shows: normalized tokens are shown in normalized form, as the reference does.
  std::string decoded;
};

// A piece of input after added-token extraction: either an added token (id >= 0) or
// normalized text (id < 0) for the pre-tokenizer and the model.
struct Segment {
  int32_t id = -1;
  PreToken text;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) is applied to the content of normalized tokens so that they
  // match normalized text.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Extracts non-normalized tokens from the raw text, normalizes what is left, then extracts
  // normalized tokens from it. With parse_special false, special tokens are not matched
  // (their text goes to the model as ordinary text).
  void split(std::string_view text, bool parse_special, const Normalizer* normalizer, std::vector<Segment>& out) const;

  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;
  bool is_special_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie for leftmost-longest matching.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                       // index into tokens_
    };
    std::vector<Node> nodes{1};
    bool first_byte[256] = {};
    void insert(std::string_view key, int32_t token);
    int32_t child(int32_t node, unsigned char b) const;
    bool empty() const { return nodes.size() == 1; }
  };
  struct Match {
    size_t start, end;
    int32_t token;
  };
  // The successive matches of `trie` in `text`, after single_word / lstrip / rstrip rules.
  void find_matches(std::string_view text, const Trie& trie, bool parse_special, std::vector<Match>& out) const;
  void split_with(const PreToken& piece, const Trie& trie, bool parse_special, std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_trie_, normalized_trie_;
};

}  // namespace spark
