// normalizer.h — text normalizers of tokenizer.json (NFC/NFKC/..., Replace, Prepend, Lowercase,
// Strip, StripAccents, Bert, Precompiled, Sequence), applied to each piece left between added tokens.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace spark {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer described by a tokenizer.json "normalizer" object; nullptr for null.
// Throws InputError on unknown types or malformed fields.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec);

// Unicode normalization forms through utf8proc (exposed for other stages).
enum class UnicodeForm { NFC, NFD, NFKC, NFKD };
void unicode_normalize(std::string& text, UnicodeForm form);

// Factories used when building a tokenizer without tokenizer.json (GGUF metadata).
std::unique_ptr<Normalizer> make_replace_normalizer(const std::string& from, const std::string& to);
std::unique_ptr<Normalizer> make_prepend_normalizer(const std::string& prefix);
std::unique_ptr<Normalizer> make_sequence_normalizer(std::vector<std::unique_ptr<Normalizer>> items);
// SentencePiece's precompiled_charsmap, already decoded; `field` names it in errors.
std::unique_ptr<Normalizer> make_precompiled_normalizer(std::string_view charsmap, const std::string& field);

}  // namespace spark
