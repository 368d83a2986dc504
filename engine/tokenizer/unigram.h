// unigram.h — the SentencePiece Unigram model: each word is cut into the pieces whose summed
// log-probabilities are highest (Viterbi), with Hugging Face's handling of unknown characters
// and byte fallback.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/token_model.h"

namespace spark {

class UnigramModel : public TokenModel {
 public:
  // pieces[i] has id i and log-probability scores[i]. Throws InputError when the vocabulary is
  // empty, the two lists differ in length, a score is not finite, or unk_id is out of range.
  UnigramModel(std::vector<std::string> pieces, std::vector<double> scores, std::optional<int32_t> unk_id,
               bool byte_fallback);
  ~UnigramModel() override;

  // Throws InputError when the word holds a character no piece covers and there is no unk_id
  // (Hugging Face fails the same way).
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t max_id() const override { return int32_t(pieces_.size()) - 1; }

  // The best segmentation of `word` as (end byte, id) pairs, before unknown pieces are fused
  // and byte fallback applied; exposed for tests.
  std::vector<std::pair<size_t, int32_t>> best_path(std::string_view word) const;

 private:
  // A byte trie over the pieces: each node's children are contiguous and sorted by label.
  struct Trie {
    std::vector<uint32_t> first_child;
    std::vector<uint16_t> child_count;
    std::vector<uint8_t> label;
    std::vector<int32_t> id;  // the piece ending at this node, -1 if none
    int32_t child(int32_t node, uint8_t byte) const;
  };
  void build_trie();
  int32_t piece_id(std::string_view s) const;

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  double unk_score_ = 0;
  int32_t byte_ids_[256];  // id of "<0xNN>", -1 if absent
  Trie trie_;
};

}  // namespace spark
