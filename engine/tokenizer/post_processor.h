// post_processor.h — post-processors of tokenizer.json that add special tokens around a
// single sequence or a pair (TemplateProcessing, Bert, Roberta, ByteLevel, Sequence), and the
// prefix / suffix form GGUF tokenizers use.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spark {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens of a single sequence when add_special_tokens is set.
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const;
  // The pair form (a cross-encoder's query and document): `first` becomes the whole input,
  // with the pair's special tokens when add_special_tokens is set, else first then second.
  void process_pair(std::vector<int32_t>& first, const std::vector<int32_t>& second, bool add_special_tokens) const;
  // Hugging Face's process_encodings: takes the sequences (one, or two for a pair) and leaves a
  // list whose concatenation is the result. Only the stages of a Sequence see each other's lists.
  virtual void process_list(std::vector<std::vector<int32_t>>& seqs, bool add_special_tokens) const = 0;
};

// `token_id` resolves token strings named by Bert/Roberta processors; `vocab_size` bounds the
// ids a processor may add. Throws InputError on malformed specs or out-of-range ids.
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& spec,
                                                   const std::function<std::optional<int32_t>(const std::string&)>& token_id,
                                                   int32_t vocab_size);

// The prefix / suffix form used for GGUF tokenizers (add_bos / add_eos). A pair is
// prefix A suffix separator B suffix, as llama.cpp's server lays out a rerank input without a
// rerank template ([BOS] query [EOS] [SEP] document [EOS]); `separator` is empty when the
// vocabulary adds no SEP.
std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix,
                                                    std::vector<int32_t> separator = {});

}  // namespace spark
