// post_processor.h — post-processors of tokenizer.json that add special tokens around a
// single sequence (TemplateProcessing, Bert, Roberta, ByteLevel, Sequence).
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
  virtual void process(std::vector<int32_t>& ids, bool add_special_tokens) const = 0;
};

// `token_id` resolves token strings named by Bert/Roberta processors; `vocab_size` bounds the
// ids a processor may add. Throws InputError on malformed specs or out-of-range ids.
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& spec,
                                                   const std::function<std::optional<int32_t>(const std::string&)>& token_id,
                                                   int32_t vocab_size);

// The prefix / suffix form used for GGUF tokenizers (add_bos / add_eos).
std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

}  // namespace spark
