// pooling.cpp — an embedder's or reranker's pooling, normalisation and score head, read
// from its files.
#include "engine/model/pooling.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/model/arch.h"
#include "engine/model/architecture.h"
#include "engine/model/quant.h"
#include "engine/util/check.h"

namespace spark {
namespace fs = std::filesystem;

namespace {

// Qwen3-Reranker's prompt, as its model card gives it: the system turn that asks for a
// yes or no, the pair in the user turn, and an empty thinking block opening the answer.
constexpr const char* kQwen3RerankTemplate =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n<Instruct>: "
    "{instruction}\n<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
constexpr const char* kDefaultInstruction = "Given a web search query, retrieve relevant passages that answer the query";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw InputError("cannot read '" + p.string() + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || (!j.is_object() && !j.is_array())) throw InputError("'" + p.string() + "' is not valid JSON");
  return j;
}

// sentence-transformers' folder layout: modules.json lists the modules in order; its
// Pooling module's config says which pooling, a Normalize module normalises.
void read_sentence_transformers(const fs::path& dir, PoolingModel& m) {
  const fs::path modules = dir / "modules.json";
  if (!fs::is_regular_file(modules)) return;
  const nlohmann::json list = read_json(modules);
  if (!list.is_array()) throw InputError("'" + modules.string() + "' must be a list of modules");
  m.normalize = false;
  for (const auto& mod : list) {
    const std::string type = mod.is_object() && mod.value("type", nlohmann::json()).is_string() ? mod["type"].get<std::string>() : "";
    const std::string path = mod.is_object() && mod.value("path", nlohmann::json()).is_string() ? mod["path"].get<std::string>() : "";
    if (type.ends_with(".Normalize")) m.normalize = true;
    if (!type.ends_with(".Pooling")) continue;
    if (path.find("..") != std::string::npos) throw InputError("'" + modules.string() + "': module path '" + path + "' leaves the folder");
    const fs::path cfg = dir / path / "config.json";
    if (!fs::is_regular_file(cfg)) throw InputError("'" + modules.string() + "' names a Pooling module, but '" + cfg.string() + "' is missing");
    const nlohmann::json c = read_json(cfg);
    const auto on = [&](const char* key) { return c.is_object() && c.value(key, false) == true; };
    std::vector<std::string> modes;
    for (const char* k : {"pooling_mode_cls_token", "pooling_mode_mean_tokens", "pooling_mode_max_tokens",
                          "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
      if (on(k)) modes.push_back(k);
    if (modes.size() != 1)
      throw InputError("'" + cfg.string() + "' must turn on exactly one pooling_mode_* (" + std::to_string(modes.size()) + " are on)");
    if (modes[0] == "pooling_mode_lasttoken") m.pooling = Pooling::LAST;
    else if (modes[0] == "pooling_mode_cls_token") m.pooling = Pooling::CLS;
    else if (modes[0] == "pooling_mode_mean_tokens") m.pooling = Pooling::MEAN;
    else throw InputError("'" + cfg.string() + "': " + modes[0] + " is not a pooling sparkd runs (last token, CLS or mean)");
  }
}

// llama.cpp's pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank (the pooled state through
// the classifier: an encoder's first token's, a decoder's last token's).
void read_gguf_pooling(const GgufFile& f, const std::string& arch, bool encoder, PoolingModel& m) {
  const std::optional<int64_t> type = f.get_int(arch + ".pooling_type");
  if (!type) return;
  switch (*type) {
    case 1: m.pooling = Pooling::MEAN; break;
    case 2: m.pooling = Pooling::CLS; break;
    case 3: m.pooling = Pooling::LAST; break;
    case 4: m.pooling = encoder ? Pooling::CLS : Pooling::LAST; break;
    default:
      throw InputError("GGUF file '" + f.source + "': " + arch + ".pooling_type = " + std::to_string(*type) +
                       " is not a pooling an embedder or reranker is served with (1 mean, 2 cls, 3 last, 4 rank)");
  }
  if (auto t = f.get_string("tokenizer.chat_template.rerank")) m.rerank_template = *t;
}

std::vector<float> row_of(const Tensor& t, int64_t row, int64_t hidden, const std::string& what) {
  if (t.shape.size() != 2 || t.shape[1] != hidden || row < 0 || row >= t.shape[0])
    throw InputError(what + ": tensor '" + t.name + "' has no row " + std::to_string(row) + " of " + std::to_string(hidden) + " values");
  std::vector<float> out(static_cast<size_t>(hidden));
  dequantize_tensor_row(t, row, out.data());
  return out;
}

// The score head: a classifier the file holds (score.weight, GGUF cls.output), else the
// LM-head rows of "yes" and "no" (Qwen3-Reranker is a causal LM asked for that word).
void read_score_head(const ModelInfo& info, const std::function<std::optional<int32_t>(const std::string&)>& token_id,
                     PoolingModel& m) {
  const int64_t h = m.hidden_size;
  const std::string what = "reranker '" + info.path + "'";
  if (info.format == ModelFormat::DUMMY) {  // dummy weights: a fixed head, for load tests
    m.score_row.assign(size_t(h), 1.0f / float(h));
    return;
  }
  const auto find = [&](const std::string& name) -> const Tensor* {
    auto it = info.tensors.find(name);
    return it == info.tensors.end() ? nullptr : &it->second;
  };
  // A cross-encoder's classifier (XLM-R's, GGUF cls): dense and tanh before the output row.
  if (const Tensor* dense = find("score.dense.weight")) {
    const Tensor* bias = find("score.dense.bias");
    if (dense->shape != std::vector<int64_t>{h, h} || !bias || bias->shape != std::vector<int64_t>{h})
      throw InputError(what + ": its classifier's dense layer must be " + std::to_string(h) + " x " + std::to_string(h) +
                       " with a bias of " + std::to_string(h));
    m.score_dense.resize(size_t(h * h));
    for (int64_t r = 0; r < h; ++r) dequantize_tensor_row(*dense, r, m.score_dense.data() + r * h);
    m.score_dense_bias.resize(size_t(h));
    dequantize_tensor_row(*bias, 0, m.score_dense_bias.data());
  }
  if (const Tensor* cls = find("score.weight")) {
    const Tensor* bias = find("score.bias");
    std::vector<float> b(cls->shape.empty() ? 0 : size_t(cls->shape[0]), 0.0f);
    if (bias) {
      if (bias->shape.size() != 1 || bias->shape[0] != cls->shape[0] || !dequant_supported(bias->dtype))
        throw InputError(what + ": score.bias must hold one value per row of score.weight");
      dequantize_tensor_row(*bias, 0, b.data());
    }
    if (cls->shape.size() == 2 && cls->shape[0] == 1) {
      m.score_row = row_of(*cls, 0, h, what);
      m.score_bias = b[0];
      return;
    }
    // Two rows: which is "yes" comes from the labels llama.cpp writes beside them.
    int64_t yes = -1;
    if (info.gguf) {
      const GgufValue* labels = info.gguf->find(info.spec.arch->gguf_name + std::string(".classifier.output_labels"));
      if (labels)
        for (size_t i = 0; i < labels->strings.size(); ++i)
          if (labels->strings[i] == "yes") yes = int64_t(i);
    }
    if (cls->shape.size() != 2 || cls->shape[0] != 2 || yes < 0)
      throw InputError(what + ": its classifier has " + (cls->shape.empty() ? "no" : std::to_string(cls->shape[0])) +
                       " rows; a reranker's has one, or two labelled \"yes\" and \"no\" (classifier.output_labels)");
    const std::vector<float> y = row_of(*cls, yes, h, what), n = row_of(*cls, 1 - yes, h, what);
    m.score_row.resize(size_t(h));
    for (size_t i = 0; i < size_t(h); ++i) m.score_row[i] = y[i] - n[i];
    m.score_bias = b[size_t(yes)] - b[size_t(1 - yes)];
    return;
  }
  const std::optional<int32_t> yes = token_id("yes"), no = token_id("no");
  if (!yes || !no)
    throw InputError(what + " has no classifier (score.weight) and its vocabulary has no \"yes\" and \"no\" tokens to "
                     "score with its LM head");
  const Tensor* head = find(tensor_name(Part::LM_HEAD));
  if (!head) head = find(tensor_name(Part::EMBEDDING));  // tied
  if (!head) throw InputError(what + " holds neither an LM head nor an embedding to score with");
  const std::vector<float> y = row_of(*head, *yes, h, what), n = row_of(*head, *no, h, what);
  m.score_row.resize(size_t(h));
  for (size_t i = 0; i < size_t(h); ++i) m.score_row[i] = y[i] - n[i];
}

}  // namespace

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::LAST: return "last";
    case Pooling::CLS: return "cls";
    case Pooling::MEAN: return "mean";
  }
  return "?";
}

float PoolingModel::score(std::span<const float> hidden) const {
  SPARK_CHECK(hidden.size() == score_row.size(), "a score needs one hidden state of the head's width");
  std::vector<float> dense;
  if (!score_dense.empty()) {
    const size_t h = hidden.size();
    dense.resize(h);
    for (size_t r = 0; r < h; ++r) {
      double y = score_dense_bias[r];
      for (size_t i = 0; i < h; ++i) y += double(score_dense[r * h + i]) * double(hidden[i]);
      dense[r] = float(std::tanh(y));
    }
    hidden = dense;
  }
  double z = score_bias;
  for (size_t i = 0; i < hidden.size(); ++i) z += double(score_row[i]) * double(hidden[i]);
  return float(1.0 / (1.0 + std::exp(-z)));
}

std::string PoolingModel::rerank_prompt(const std::string& query, const std::string& document,
                                        const std::string& instruction) const {
  // Placeholders are filled left to right in one pass, so text a client sends that looks
  // like a placeholder stays as it is.
  std::string out;
  const std::string& t = rerank_template;
  for (size_t i = 0; i < t.size();) {
    const auto at = [&](const char* p) { return t.compare(i, std::char_traits<char>::length(p), p) == 0; };
    if (at("{query}")) { out += query; i += 7; }
    else if (at("{document}")) { out += document; i += 10; }
    else if (at("{instruction}")) { out += instruction.empty() ? default_instruction : instruction; i += 13; }
    else out += t[i++];
  }
  return out;
}

std::vector<float> embedding_of(const PoolingModel& model, std::span<const float> hidden, int64_t dimensions) {
  std::vector<float> v(hidden.begin(), hidden.end());
  if (dimensions > 0 && size_t(dimensions) < v.size()) v.resize(size_t(dimensions));
  if (model.normalize || dimensions > 0) {
    double sq = 0;
    for (float x : v) sq += double(x) * double(x);
    const double norm = std::max(std::sqrt(sq), 1e-12);  // as torch's F.normalize
    for (float& x : v) x = float(double(x) / norm);
  }
  return v;
}

PoolingModel read_pooling_model(const ModelInfo& info,
                                const std::function<std::optional<int32_t>(const std::string&)>& token_id) {
  SPARK_CHECK(info.role == "embed" || info.role == "rerank", "pooling is read for embedders and rerankers");
  PoolingModel m;
  m.hidden_size = info.spec.hidden_size;
  // The engine keeps one token's state of a prompt (Request::last_hidden_state): a decoder's
  // last, an encoder's first (SchedulerConfig::whole_prompts); mean pooling would need every row.
  const Pooling kept = info.spec.encoder ? Pooling::CLS : Pooling::LAST;
  m.pooling = kept;
  if (info.gguf) read_gguf_pooling(*info.gguf, info.spec.arch->gguf_name, info.spec.encoder, m);
  else if (fs::is_directory(info.path)) read_sentence_transformers(info.path, m);
  if (m.pooling != kept)
    throw InputError("model '" + info.path + "' pools with " + pooling_name(m.pooling) + "; sparkd serves " +
                     (info.spec.encoder ? "encoders that pool the first (CLS) token" : "decoders that pool the last token"));
  if (info.role == "rerank") {
    m.normalize = false;
    m.pair_input = info.spec.encoder;
    if (m.rerank_template.empty()) m.rerank_template = kQwen3RerankTemplate;
    if (m.rerank_template.find("{query}") == std::string::npos || m.rerank_template.find("{document}") == std::string::npos)
      throw InputError("model '" + info.path + "': its rerank template must hold {query} and {document}");
    m.default_instruction = kDefaultInstruction;
    read_score_head(info, token_id, m);
  }
  return m;
}

}  // namespace spark
