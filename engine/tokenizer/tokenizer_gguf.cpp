// tokenizer_gguf.cpp — builds a Tokenizer from GGUF tokenizer metadata, mirroring the
// tokenizer.json that Hugging Face ships for the same model ("gpt2", "llama" and "t5" vocabularies).
#include <map>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unigram.h"
#include "engine/util/check.h"

namespace spark {

namespace {

constexpr const char* LLAMA3_REGEX =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* QWEN2_REGEX =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
// Qwen3.5's: letters keep their combining marks (\p{M}) in one piece.
constexpr const char* QWEN35_REGEX =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* O200K_REGEX =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* TEKKEN_REGEX =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* DEEPSEEK_V3_REGEX =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// The pre-tokenizer of each "tokenizer.ggml.pre" value, as in the model's tokenizer.json.
std::unique_ptr<PreTokenizer> gpt2_pre_tokenizer(const std::string& pre) {
  std::vector<std::unique_ptr<PreTokenizer>> seq;
  auto split_then_bytes = [&](const char* re) {
    seq.push_back(make_split_regex(re, SplitBehavior::ISOLATED, false));
    seq.push_back(make_byte_level(false, false));
    return make_sequence(std::move(seq));
  };
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2" || pre == "phi-2" || pre == "mpt" || pre == "olmo" ||
      pre == "jais" || pre == "roberta-bpe")
    return make_byte_level(false, true);
  if (pre == "llama-bpe" || pre == "llama3" || pre == "dbrx" || pre == "smaug-bpe" || pre == "falcon3")
    return split_then_bytes(LLAMA3_REGEX);
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "megrez") return split_then_bytes(QWEN2_REGEX);
  if (pre == "qwen35") return split_then_bytes(QWEN35_REGEX);
  if (pre == "gpt-4o" || pre == "o200k" || pre == "gpt-oss") return split_then_bytes(O200K_REGEX);
  if (pre == "tekken") return split_then_bytes(TEKKEN_REGEX);
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell") {
    seq.push_back(make_digits(true));
    seq.push_back(make_byte_level(false, true));
    return make_sequence(std::move(seq));
  }
  if (pre == "deepseek-v3") {
    seq.push_back(make_split_regex("\\p{N}{1,3}", SplitBehavior::ISOLATED, false));
    seq.push_back(make_split_regex("[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
                                   SplitBehavior::ISOLATED, false));
    return split_then_bytes(DEEPSEEK_V3_REGEX);
  }
  throw InputError("GGUF tokenizer: unsupported pre-tokenizer '" + pre +
                   "' (supported: default, gpt2, llama-bpe, llama3, qwen2, qwen35, deepseek-r1-qwen, gpt-4o, tekken, smollm, "
                   "starcoder, refact, deepseek-v3, ...)");
}

void check_id(int32_t id, size_t n, const char* what) {
  if (id >= 0 && size_t(id) >= n)
    throw InputError(std::string("GGUF tokenizer: ") + what + " id " + std::to_string(id) +
                     " is outside the vocabulary (" + std::to_string(n) + " tokens)");
}

}  // namespace

// Tokenizer's friend: the parts of a GGUF-described tokenizer that need its members.
struct TokenizerBuilder {
  static void unigram(Tokenizer& t, const GgufVocab& v);
};

// SentencePiece Unigram ("t5": T5, XLM-RoBERTa, bge-m3, multilingual-e5), as Hugging Face's
// tokenizer.json for those models has it: Precompiled normalizer (then runs of spaces made one
// when the model removes extra whitespace), Metaspace with splitting, Metaspace decoder.
void TokenizerBuilder::unigram(Tokenizer& t, const GgufVocab& v) {
  if (v.scores.empty()) throw InputError("GGUF tokenizer: a \"t5\" (Unigram) vocabulary needs tokenizer.ggml.scores");
  bool byte_fallback = false;
  for (int32_t type : v.token_types) byte_fallback = byte_fallback || type == 6;
  std::optional<int32_t> unk_id;
  if (v.unk_id >= 0) unk_id = v.unk_id;
  t.model_ = std::make_unique<UnigramModel>(v.tokens, std::vector<double>(v.scores.begin(), v.scores.end()), unk_id,
                                            byte_fallback);
  std::vector<std::unique_ptr<Normalizer>> norms;
  if (!v.precompiled_charsmap.empty())
    norms.push_back(make_precompiled_normalizer(v.precompiled_charsmap, "GGUF tokenizer.ggml.precompiled_charsmap"));
  if (v.remove_extra_whitespaces)
    norms.push_back(make_normalizer({{"type", "Replace"}, {"pattern", {{"Regex", " {2,}"}}}, {"content", " "}}));
  if (!norms.empty()) t.normalizer_ = make_sequence_normalizer(std::move(norms));
  const char* scheme = v.add_space_prefix ? "always" : "never";
  t.pre_tokenizer_ = make_metaspace("\xE2\x96\x81", scheme, true);
  t.decoder_ = byte_fallback ? make_sentencepiece_decoder(v.add_space_prefix)
                             : make_decoder({{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", scheme}});
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf_vocab(const GgufVocab& v) {
  const size_t n = v.tokens.size();
  if (n == 0) throw InputError("GGUF tokenizer: tokenizer.ggml.tokens is empty");
  if (!v.token_types.empty() && v.token_types.size() != n)
    throw InputError("GGUF tokenizer: token_type has " + std::to_string(v.token_types.size()) + " entries for " +
                     std::to_string(n) + " tokens");
  if (!v.scores.empty() && v.scores.size() != n)
    throw InputError("GGUF tokenizer: scores has " + std::to_string(v.scores.size()) + " entries for " +
                     std::to_string(n) + " tokens");
  check_id(v.bos_id, n, "bos");
  check_id(v.eos_id, n, "eos");
  check_id(v.unk_id, n, "unknown-token");
  check_id(v.pad_id, n, "padding");

  for (size_t i = 0; i < v.token_types.size(); ++i)
    if (v.token_types[i] == 6 && parse_byte_token(v.tokens[i]) < 0)
      throw InputError("GGUF tokenizer: byte token " + std::to_string(i) + " '" + v.tokens[i] +
                       "' is not of the form <0xNN> with two hex digits");
  TokenIndex vocab;
  vocab.reserve(n);
  for (size_t i = 0; i < n; ++i) vocab.insert(v.tokens[i], int32_t(i));  // first spelling wins

  // Control (3) and user-defined (4) tokens are matched in text before the model, like the
  // added tokens of tokenizer.json; control and unknown (2) ones are special.
  std::vector<AddedToken> added;
  for (size_t i = 0; i < v.token_types.size(); ++i) {
    int32_t type = v.token_types[i];
    if (type != 2 && type != 3 && type != 4) continue;
    if (v.tokens[i].empty()) continue;
    AddedToken t;
    t.content = v.tokens[i];
    t.id = int32_t(i);
    t.special = type != 4;
    t.normalized = false;
    added.push_back(std::move(t));
  }

  std::unique_ptr<Tokenizer> t(new Tokenizer());
  if (v.model == "gpt2") {
    BpeVocab bv;
    bv.tokens = std::move(vocab);
    for (size_t r = 0; r < v.merges.size(); ++r) {
      std::string_view m = v.merges[r];
      size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) throw InputError("GGUF tokenizer: merge #" + std::to_string(r) + " has no space");
      bv.add_merge(m.substr(0, sp), m.substr(sp + 1));
    }
    t->model_ = std::make_unique<BpeModel>(std::move(bv), BpeOptions{});
    t->pre_tokenizer_ = gpt2_pre_tokenizer(v.pre.empty() ? "default" : v.pre);
    t->decoder_ = make_byte_level_decoder();
  } else if (v.model == "llama") {
    BpeOptions o;
    o.byte_fallback = true;
    o.fuse_unk = true;
    if (v.unk_id >= 0) o.unk_token = v.tokens[size_t(v.unk_id)];
    t->model_ = std::make_unique<BpeModel>(std::move(vocab), v.scores, std::move(o));
    // SentencePiece: spaces become U+2581; the first piece of the input gets one prepended.
    t->pre_tokenizer_ = make_metaspace("\xE2\x96\x81", v.add_space_prefix ? "first" : "never", false);
    t->decoder_ = make_sentencepiece_decoder(v.add_space_prefix);
  } else if (v.model == "t5") {
    TokenizerBuilder::unigram(*t, v);
  } else {
    throw InputError("GGUF tokenizer: tokenizer.ggml.model '" + v.model + "' is not supported (gpt2, llama and t5 are)");
  }
  t->added_ = AddedVocabulary(std::move(added), nullptr);
  t->finish(v.model == "gpt2");
  std::vector<int32_t> prefix, suffix, sep;
  if (v.add_bos && v.bos_id >= 0) prefix.push_back(v.bos_id);
  if (v.add_eos && v.eos_id >= 0) suffix.push_back(v.eos_id);
  // A pair is [BOS] a [EOS] [SEP] b [EOS], as llama.cpp lays out a rerank input without a
  // template (XLM-R rerankers: <s> a </s></s> b </s>).
  if (v.add_sep && v.sep_id >= 0) sep.push_back(v.sep_id);
  if (!prefix.empty() || !suffix.empty() || !sep.empty())
    t->post_processor_ = make_affix_processor(prefix, suffix, sep);
  t->bos_id_ = v.bos_id;
  t->eos_id_ = v.eos_id;
  if (v.bos_id >= 0) t->bos_token_ = v.tokens[size_t(v.bos_id)];
  if (v.eos_id >= 0) t->eos_token_ = v.tokens[size_t(v.eos_id)];
  return t;
}

}  // namespace spark
