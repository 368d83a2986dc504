// gguf_meta.cpp — what GGUF metadata and tensor names mean to sparkd: the tokenizer
// (tokenizer.ggml.*) and the Hugging Face name of each tensor.

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
  voc.bos_id = special_id(f, "tokenizer.ggml.bos_token_id", n);
  voc.eos_id = special_id(f, "tokenizer.ggml.eos_token_id", n);
  voc.unk_id = special_id(f, "tokenizer.ggml.unknown_token_id", n);
  voc.pad_id = special_id(f, "tokenizer.ggml.padding_token_id", n);
  // llama.cpp's defaults when the flags are absent: SentencePiece vocabularies add BOS
  // and a leading space, byte-level BPE ones add neither.
  bool spm = voc.model == "llama";
  voc.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(spm);
  voc.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  voc.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  voc.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  return voc;
}

GgufVocab read_gguf_vocab(const std::string& path) { return read_gguf_vocab(GgufFile::open(path)); }

namespace {

struct NameRule {
  const char* gguf;  // suffix after "blk.N."
  const char* hf;    // suffix after "model.layers.N."
};
// llama.cpp's names (gguf-py/gguf/constants.py TENSOR_NAMES) against Hugging Face's.
const NameRule LAYER_RULES[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_exps", "mlp.experts.{E}.gate_proj"},
    {"ffn_up_exps", "mlp.experts.{E}.up_proj"},
    {"ffn_down_exps", "mlp.experts.{E}.down_proj"},
};

}  // namespace

std::optional<std::string> gguf_to_hf_name(const std::string& name) {
  static const std::pair<const char*, const char*> globals[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  for (auto [g, h] : globals)
    if (name == g) return std::string(h);
  if (name.rfind("blk.", 0) != 0) return std::nullopt;
  size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6) return std::nullopt;
  std::string layer = name.substr(4, dot - 4);
  for (char c : layer)
    if (c < '0' || c > '9') return std::nullopt;
  if (layer.size() > 1 && layer[0] == '0') return std::nullopt;
  std::string rest = name.substr(dot + 1);
  size_t last = rest.rfind('.');
  if (last == std::string::npos) return std::nullopt;
  std::string base = rest.substr(0, last), kind = rest.substr(last + 1);
  if (kind != "weight" && kind != "bias") return std::nullopt;
  for (const NameRule& r : LAYER_RULES)
    if (base == r.gguf) return "model.layers." + layer + "." + r.hf + "." + kind;
  return std::nullopt;
}

bool gguf_is_stacked_experts(const std::string& name) {
  return name.find("_exps.") != std::string::npos && name.rfind("blk.", 0) == 0;
}

std::string gguf_expert_name(const std::string& pattern, int64_t expert) {
  size_t p = pattern.find("{E}");
  SPARK_CHECK(p != std::string::npos, "not an expert pattern: " + pattern);
  return pattern.substr(0, p) + std::to_string(expert) + pattern.substr(p + 3);
}

}  // namespace spark
