// bpe.h — the BPE model: vocabulary, merge ranks in a flat hash map, and a per-word cache.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/token_index.h"
#include "engine/tokenizer/token_model.h"

namespace spark {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept;
};

// A BPE vocabulary and merge list as read from a file, before the merges are resolved.
struct BpeVocab {
  TokenIndex tokens;  // token -> id
  std::string merge_arena;
  std::vector<uint32_t> merge_spans;  // per merge: left offset, left length, right offset, right length
  void add_merge(std::string_view left, std::string_view right);
  size_t merge_count() const { return merge_spans.size() / 4; }
  std::string_view merge_part(size_t merge, int side) const {
    return std::string_view(merge_arena).substr(merge_spans[merge * 4 + side * 2], merge_spans[merge * 4 + side * 2 + 1]);
  }
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel : public TokenModel {
 public:
  // Token ids may be sparse; merges are (left, right) pairs, highest priority first. Throws
  // InputError when a merge names or produces a token that is not in the vocabulary.
  BpeModel(BpeVocab vocab, BpeOptions opts);
  // SentencePiece BPE without a merge list (GGUF "llama"): a pair merges when its
  // concatenation is a token, and higher-scoring tokens merge first.
  BpeModel(TokenIndex vocab, const std::vector<float>& scores, BpeOptions opts);
  ~BpeModel() override;

  // Byte-level mode: words arrive as raw bytes rather than GPT-2 mapped characters. Tokens
  // are looked up by the bytes they stand for, which saves the mapping on every encode.
  void use_raw_bytes() override;

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;

  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int32_t max_id() const override { return max_id_; }

 private:
  struct MergeTable;
  struct Cache;
  void build_reverse();
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;

  TokenIndex vocab_;
  std::vector<std::string> reverse_;  // id -> token
  std::vector<bool> present_;         // ids that have a token
  int32_t max_id_ = -1;
  BpeOptions opts_;
  std::unique_ptr<MergeTable> merges_;
  std::optional<int32_t> unk_id_;
  int32_t byte_fallback_ids_[256];
  bool raw_bytes_ = false;
  TokenIndex raw_vocab_;  // raw-byte spelling -> id (byte-level mode)
  int32_t raw_byte_ids_[256];
  std::unique_ptr<Cache> cache_;
};

}  // namespace spark
