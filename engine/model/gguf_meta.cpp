// gguf_meta.cpp — what GGUF metadata means to sparkd: the tokenizer (tokenizer.ggml.*).

#include "engine/model/gguf.h"
#include "engine/util/check.h"

namespace spark {
namespace {

int32_t special_id(const GgufFile& f, const std::string& key, size_t n_tokens) {
  auto v = f.get_int(key);
  if (!v) return -1;
  if (*v < 0 || static_cast<uint64_t>(*v) >= n_tokens)
    throw InputError("GGUF file '" + f.source + "': " + key + " = " + std::to_string(*v) +
                     " is outside the vocabulary of " + std::to_string(n_tokens) + " tokens");
  return static_cast<int32_t>(*v);
}

const GgufValue* array_of(const GgufFile& f, const std::string& key, std::initializer_list<GgufType> types) {
  const GgufValue* v = f.find(key);
  if (!v) return nullptr;
  bool ok = v->type == GgufType::ARRAY;
  if (ok) {
    ok = false;
    for (GgufType t : types) ok = ok || v->elem_type == t;
  }
  if (!ok)
    throw InputError("GGUF file '" + f.source + "': " + key + " has type " + gguf_type_name(v->type) +
                     (v->type == GgufType::ARRAY ? " of " + gguf_type_name(v->elem_type) : "") +
                     ", expected an array of " + gguf_type_name(*types.begin()));
  return v;
}

}  // namespace

GgufVocab read_gguf_vocab(const GgufFile& f) {
  GgufVocab voc;
  auto model = f.get_string("tokenizer.ggml.model");
  if (!model) throw InputError("GGUF file '" + f.source + "' has no tokenizer (tokenizer.ggml.model is missing)");
  voc.model = *model;
  voc.pre = f.get_string("tokenizer.ggml.pre").value_or("");
  const GgufValue* tokens = array_of(f, "tokenizer.ggml.tokens", {GgufType::STRING});
  if (!tokens || tokens->strings.empty())
    throw InputError("GGUF file '" + f.source + "' has no tokenizer.ggml.tokens");
  voc.tokens = tokens->strings;
  size_t n = voc.tokens.size();
  if (const GgufValue* s = array_of(f, "tokenizer.ggml.scores", {GgufType::FLOAT32, GgufType::FLOAT64})) {
    if (s->floats.size() != n)
      throw InputError("GGUF file '" + f.source + "': tokenizer.ggml.scores has " +
                       std::to_string(s->floats.size()) + " entries for " + std::to_string(n) + " tokens");
    voc.scores.assign(s->floats.begin(), s->floats.end());
  }
  if (const GgufValue* t = array_of(f, "tokenizer.ggml.token_type",
                                    {GgufType::INT32, GgufType::UINT32, GgufType::INT8, GgufType::UINT8,
                                     GgufType::INT16, GgufType::UINT16, GgufType::INT64})) {
    if (t->ints.size() != n)
      throw InputError("GGUF file '" + f.source + "': tokenizer.ggml.token_type has " +
                       std::to_string(t->ints.size()) + " entries for " + std::to_string(n) + " tokens");
    voc.token_types.reserve(n);
    for (int64_t v : t->ints) {
      if (v < 0 || v > 6)
        throw InputError("GGUF file '" + f.source + "': token type " + std::to_string(v) + " is not 0..6");
      voc.token_types.push_back(static_cast<int32_t>(v));
    }
  }
  if (const GgufValue* m = array_of(f, "tokenizer.ggml.merges", {GgufType::STRING})) voc.merges = m->strings;
  if (const GgufValue* c = array_of(f, "tokenizer.ggml.precompiled_charsmap", {GgufType::UINT8, GgufType::INT8})) {
    voc.precompiled_charsmap.reserve(c->ints.size());
    for (int64_t b : c->ints) voc.precompiled_charsmap.push_back(static_cast<char>(b));
  }
  voc.bos_id = special_id(f, "tokenizer.ggml.bos_token_id", n);
  voc.eos_id = special_id(f, "tokenizer.ggml.eos_token_id", n);
  voc.unk_id = special_id(f, "tokenizer.ggml.unknown_token_id", n);
  voc.pad_id = special_id(f, "tokenizer.ggml.padding_token_id", n);
  voc.sep_id = special_id(f, "tokenizer.ggml.seperator_token_id", n);
  // llama.cpp's defaults when the flags are absent: SentencePiece BPE vocabularies add BOS
  // and a leading space, Unigram ("t5") ones EOS and a leading space, byte-level BPE neither.
  bool spm = voc.model == "llama", t5 = voc.model == "t5";
  voc.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  voc.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(t5);
  voc.add_sep = f.get_bool("tokenizer.ggml.add_sep_token").value_or(false);
  voc.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm || t5);
  voc.remove_extra_whitespaces = f.get_bool("tokenizer.ggml.remove_extra_whitespaces").value_or(false);
  voc.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  return voc;
}

GgufVocab read_gguf_vocab(const std::string& path) { return read_gguf_vocab(GgufFile::open(path)); }

}  // namespace spark
