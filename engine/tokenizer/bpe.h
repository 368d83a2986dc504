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

namespace spark {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept;
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel {
 public:
  // `vocab` maps token strings to ids (ids may be sparse); `merges` are (left, right) pairs,
  // highest priority first. Throws InputError when a merge names or produces a token that is
  // not in the vocabulary.
  BpeModel(StringIdMap vocab, const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opts);
  // SentencePiece BPE without a merge list (GGUF "llama"): a pair merges when its
  // concatenation is a token, and higher-scoring tokens merge first.
  BpeModel(StringIdMap vocab, const std::vector<float>& scores, BpeOptions opts);
  ~BpeModel();

  // Byte-level mode: words arrive as raw bytes rather than GPT-2 mapped characters. Tokens
  // are looked up by the bytes they stand for, which saves the mapping on every encode.
  void use_raw_bytes();

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return max_id_; }
  const StringIdMap& vocab() const { return vocab_; }

 private:
  struct MergeTable;
  struct Cache;
  void build_reverse();
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;
  void merge(std::vector<int32_t>& ids) const;

  StringIdMap vocab_;
  std::vector<const std::string*> reverse_;  // id -> token (nullptr for gaps)
  int32_t max_id_ = -1;
  BpeOptions opts_;
  std::unique_ptr<MergeTable> merges_;
  std::optional<int32_t> unk_id_;
  int32_t byte_fallback_ids_[256];
  bool raw_bytes_ = false;
  StringIdMap raw_vocab_;  // raw-byte spelling -> id (byte-level mode)
  int32_t raw_byte_ids_[256];
  std::unique_ptr<Cache> cache_;
};

}  // namespace spark
