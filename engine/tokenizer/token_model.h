// token_model.h — what the tokenizer needs of its model (BPE or Unigram): one pre-tokenized
// word to ids, and the vocabulary both ways.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spark {

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one pre-tokenized word.
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual const std::string* id_to_token(int32_t id) const = 0;  // null when the id has no token
  virtual int32_t max_id() const = 0;
  // Byte-level BPE only (see BpeModel::use_raw_bytes); other models ignore it.
  virtual void use_raw_bytes() {}
};

}  // namespace spark
