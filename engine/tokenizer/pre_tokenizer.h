// pre_tokenizer.h — pre-tokenizers of tokenizer.json (Split, ByteLevel, Metaspace, Digits,
// Whitespace, Punctuation, Bert, Sequence, ...): they cut normalized text into words for the model.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spark {

// One piece of text on its way to the model. `at_start` is true when the piece begins at
// offset 0 of the original input (Metaspace's prepend_scheme "first" depends on it).
struct PreToken {
  std::string text;
  bool at_start = false;
};

// How a split keeps the delimiters it matched (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { REMOVED, ISOLATED, MERGED_WITH_PREVIOUS, MERGED_WITH_NEXT, CONTIGUOUS };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their sub-pieces (never empty strings).
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
  // ByteLevel only: when it is the last stage and the model reads raw bytes, the byte ->
  // character mapping is skipped (the model's vocabulary is keyed by raw bytes instead).
  virtual bool set_raw_bytes_output() { return false; }
};

// Builds the pre-tokenizer of a tokenizer.json "pre_tokenizer" object; nullptr for null.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec);

// Building blocks for GGUF-described tokenizers.
std::unique_ptr<PreTokenizer> make_split_regex(const std::string& regex, SplitBehavior behavior, bool invert);
std::unique_ptr<PreTokenizer> make_byte_level(bool add_prefix_space, bool use_regex);
std::unique_ptr<PreTokenizer> make_digits(bool individual);
std::unique_ptr<PreTokenizer> make_metaspace(const std::string& replacement, const std::string& prepend_scheme, bool split);
std::unique_ptr<PreTokenizer> make_sequence(std::vector<std::unique_ptr<PreTokenizer>> items);

// Applies `behavior` to the matches covering `text` (start, end, is_match) and appends
// the resulting non-empty pieces to `out`.
struct SplitMark {
  size_t start, end;
  bool is_match;
};
void apply_split(const PreToken& piece, std::vector<SplitMark>& marks, SplitBehavior behavior,
                 std::vector<PreToken>& out);

}  // namespace spark
