// tokenizer.h — the tokenizer: text <-> token ids, loaded from tokenizer.json or GGUF metadata,
// with the semantics of Hugging Face's `tokenizers` (encode, decode, special tokens).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/added_tokens.h"
#include "engine/model/gguf_vocab.h"

namespace spark {

class Normalizer;
class PreTokenizer;
class TokenModel;
class PostProcessor;
class Decoder;

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_json_file(const std::string& tokenizer_json_path,
                                                   const std::string& tokenizer_config_path /* may be "" */);
  // From the text of tokenizer.json (and tokenizer_config.json, may be empty).
  static std::unique_ptr<Tokenizer> from_json_text(const std::string& tokenizer_json, const std::string& config_json);
  static std::unique_ptr<Tokenizer> from_gguf_vocab(const GgufVocab& v);
  // A model folder (tokenizer.json [+ tokenizer_config.json]) or a .gguf file.
  static std::unique_ptr<Tokenizer> load(const std::string& model_path);
  ~Tokenizer();

  // add_special_tokens: BOS/EOS per the post-processor, as HF encode() does.
  // parse_special: match special-token text in `text` (HF default true); false treats it as
  // plain text (safe for chat content). Ill-formed UTF-8 is read as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true, bool parse_special = true) const;
  // A pair (a cross-encoder's query and document) as HF encode(a, b) gives it: each text encoded
  // without special tokens, then joined by the post-processor's pair form (XLM-R's
  // <s> a </s></s> b </s>, BERT's [CLS] a [SEP] b [SEP]); plain concatenation without one.
  std::vector<int32_t> encode_pair(std::string_view a, std::string_view b, bool add_special_tokens = true) const;
  // Ids outside the vocabulary are skipped, as in the reference. Output is valid UTF-8.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  int32_t vocab_size() const { return vocab_size_; }  // including added tokens
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const { return added_.find_id(id) != nullptr; }  // special or not
  std::optional<int32_t> token_id(std::string_view token) const;  // exact token string -> id
  const std::string& token_text(int32_t id) const;                 // raw vocab string ("" if none)
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  std::string bos_token() const { return bos_token_; }
  std::string eos_token() const { return eos_token_; }

  // For IncrementalDetokenizer, which states what these promise.
  // True when decode() would drop this id (not in the vocabulary, or a special token
  // while skipping them); the detokenizer uses it to keep its window to visible tokens.
  bool decodes_to_nothing(int32_t id, bool skip_special_tokens) const;
  // True when the decoder chain lets a short window of tokens stand for the whole sequence.
  bool decodes_in_window() const { return decodes_in_window_; }
  // True when the decoder joins this id's text, a <0xNN> byte token, with neighbouring ones.
  bool is_fallback_byte(int32_t id) const;
  // decode() of ids that more ids may follow; `stable` is set to how many leading bytes of
  // the result no later id can change.
  std::string decode_open(const std::vector<int32_t>& ids, bool skip_special_tokens, size_t& stable) const;

 private:
  Tokenizer();
  void finish(bool raw_bytes_allowed);
  void set_bos_eos_from_config(const std::string& config_json);

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<TokenModel> model_;  // BpeModel or UnigramModel
  AddedVocabulary added_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  int32_t vocab_size_ = 0;
  bool decodes_in_window_ = true;
  bool byte_fallback_ = false;
  int32_t bos_id_ = -1, eos_id_ = -1;
  std::string bos_token_, eos_token_;

  friend struct TokenizerBuilder;
};

}  // namespace spark
