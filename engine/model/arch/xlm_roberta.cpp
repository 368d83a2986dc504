// xlm_roberta.cpp — XLM-RoBERTa encoders (BGE-M3: XLMRobertaModel; bge-reranker-v2-m3:
// XLMRobertaForSequenceClassification), and llama.cpp's `bert` GGUF files of them: bidirectional
// attention, post-norm LayerNorm layers, a GELU MLP, learned absolute positions
// (ModelSpec::encoder). Served as embedders and rerankers only: they have no LM head.
#include <algorithm>
#include <optional>
#include <utility>

#include "engine/model/arch.h"
#include "engine/model/arch/checkpoint_names.h"
#include "engine/model/architecture.h"
#include "engine/model/gguf.h"
#include "engine/model/spec_readers.h"

namespace spark {
namespace {

void read_config(const ConfigReader& r, ModelSpec& s) {
  s.encoder = true;
  s.intermediate_size = r.integer("intermediate_size", 1, MAX_DIM);
  s.rms_norm_eps = r.number_or("layer_norm_eps", 1e-12);
  if (!(s.rms_norm_eps > 0)) r.fail("layer_norm_eps", "must be positive");
  // transformers' "gelu" is the exact (erf) one; the tanh approximations are other names.
  if (r.has("hidden_act") && !(r.j["hidden_act"].is_string() && r.j["hidden_act"] == "gelu"))
    r.fail("hidden_act", "= " + r.j["hidden_act"].dump() + " is not supported (supported: \"gelu\")");
  if (r.has("position_embedding_type") && r.j["position_embedding_type"] != "absolute")
    r.fail("position_embedding_type", "= " + r.j["position_embedding_type"].dump() +
                                          " is not supported (supported: \"absolute\")");
  if (r.boolean_or("is_decoder", false)) r.fail("is_decoder", "= true is not supported: sparkd runs XLM-R as an encoder");
  // RoBERTa numbers positions from padding_idx + 1: position p reads row pad + 1 + p.
  const int64_t pad = r.integer_or("pad_token_id", 0, MAX_VOCAB, 1);
  s.position_rows = s.max_position_embeddings;
  s.position_offset = pad + 1;
  if (s.position_rows <= s.position_offset)
    r.fail("max_position_embeddings", "= " + std::to_string(s.position_rows) + " leaves no position after pad_token_id + 1");
  s.max_position_embeddings = s.position_rows - s.position_offset;
  s.type_vocab_size = r.integer_or("type_vocab_size", 0, 1024, 1);
}

void read_gguf(const GgufMetaReader& m, ModelSpec& s) {
  s.encoder = true;
  s.intermediate_size = m.integer("feed_forward_length", 1, MAX_DIM);
  s.rms_norm_eps = m.number("attention.layer_norm_epsilon", 1e-12);
  if (!(s.rms_norm_eps > 0)) m.fail(m.arch + ".attention.layer_norm_epsilon", "must be positive");
  if (m.f.get_bool(m.arch + ".attention.causal").value_or(false))
    m.fail(m.arch + ".attention.causal", "= true: sparkd runs bert files as encoders");
  // llama.cpp's converter drops the rows before RoBERTa's first position: row p is position p.
  const GgufTensorInfo* pos = m.f.find_tensor(gguf_tensor_name(Part::POS_EMBEDDING));
  if (!pos || pos->shape.size() != 2) m.fail(gguf_tensor_name(Part::POS_EMBEDDING), "is missing or not 2-D");
  s.position_rows = pos->shape[0];
  s.max_position_embeddings = std::min(s.max_position_embeddings, s.position_rows);
  const GgufTensorInfo* types = m.f.find_tensor(gguf_tensor_name(Part::TYPE_EMBEDDING));
  s.type_vocab_size = types && types->shape.size() == 2 ? types->shape[0] : 0;
}

// The checkpoint's parts of an encoder layer ("encoder.layer.N." + this) and their parts here.
constexpr std::pair<const char*, Part> kLayerParts[] = {
    {"attention.self.query", Part::Q},       {"attention.self.key", Part::K},
    {"attention.self.value", Part::V},       {"attention.output.dense", Part::O},
    {"attention.output.LayerNorm", Part::ATTN_NORM}, {"intermediate.dense", Part::UP},
    {"output.dense", Part::DOWN},            {"output.LayerNorm", Part::FFN_NORM},
};
constexpr std::pair<const char*, Part> kInputParts[] = {
    {"embeddings.word_embeddings", Part::EMBEDDING},
    {"embeddings.position_embeddings", Part::POS_EMBEDDING},
    {"embeddings.token_type_embeddings", Part::TYPE_EMBEDDING},
    {"embeddings.LayerNorm", Part::EMBED_NORM},
};

Part bias_of(Part p) {
  switch (p) {
    case Part::Q: return Part::Q_BIAS;
    case Part::K: return Part::K_BIAS;
    case Part::V: return Part::V_BIAS;
    case Part::O: return Part::O_BIAS;
    case Part::ATTN_NORM: return Part::ATTN_NORM_BIAS;
    case Part::UP: return Part::UP_BIAS;
    case Part::DOWN: return Part::DOWN_BIAS;
    case Part::FFN_NORM: return Part::FFN_NORM_BIAS;
    case Part::EMBED_NORM: return Part::EMBED_NORM_BIAS;
    default: return Part::COUNT;
  }
}

// The table's name of a checkpoint tensor; nullopt for one the model does not use (BERT's
// pooler, the position_ids buffer); the name itself when it is no part, so that the
// loader names it as unexpected.
std::optional<std::string> table_name(std::string name) {
  if (name.rfind("roberta.", 0) == 0) name = name.substr(8);
  if (name.rfind("pooler.", 0) == 0 || name == "embeddings.position_ids") return std::nullopt;
  // The sequence classifier: dense, tanh, out_proj; the reranker's score head (pooling.h).
  if (name.rfind("classifier.out_proj.", 0) == 0) return "score." + name.substr(20);
  if (name.rfind("classifier.dense.", 0) == 0) return "score.dense." + name.substr(17);
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return name;
  const std::string base = name.substr(0, dot), kind = name.substr(dot + 1);
  if (kind != "weight" && kind != "bias") return name;
  const auto part_of = [&](Part p) { return kind == "weight" ? p : bias_of(p); };
  for (const auto& [hf, part] : kInputParts)
    if (base == hf && part_of(part) != Part::COUNT) return tensor_name(part_of(part));
  const std::optional<LayerName> in_layer = split_layer_name(base + ".", "encoder.layer.");
  if (!in_layer) return name;
  for (const auto& [hf, part] : kLayerParts)
    if (in_layer->rest == std::string(hf) + ".") return tensor_name(part_of(part), in_layer->layer);
  return name;
}

std::map<std::string, Tensor> convert_checkpoint(const std::map<std::string, Tensor>& file, const ModelSpec&,
                                                 LayerRange, Weights*, const std::string& source) {
  return renamed_tensors(file, table_name, source);
}

}  // namespace

extern const Architecture kXlmRoberta{
    .hf_class = "XLMRobertaModel",
    .gguf_name = "bert",
    .read_config = read_config,
    .read_gguf = read_gguf,
    .convert_checkpoint = convert_checkpoint,
    .gguf_aliases = {{"attn_output_norm", "attn_norm"}, {"layer_output_norm", "ffn_norm"}},
};

// The cross-encoder: the same model, its classifier read as the reranker's score head.
extern const Architecture kXlmRobertaClassifier{
    .hf_class = "XLMRobertaForSequenceClassification",
    .gguf_name = nullptr,
    .read_config = read_config,
    .read_gguf = nullptr,
    .convert_checkpoint = convert_checkpoint,
};

}  // namespace spark
