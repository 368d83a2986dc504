// tokenizer_json.cpp — builds a Tokenizer from tokenizer.json (+ tokenizer_config.json).
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_json_reader.h"
#include "engine/tokenizer/unigram.h"
#include "engine/util/check.h"

namespace spark {

using json = nlohmann::json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

json parse(const std::string& text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(what + " is not valid JSON: " + e.what());
  }
}

std::optional<std::string> opt_string(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_string()) throw InputError(std::string("tokenizer.json model field '") + key + "' must be a string");
  return j[key].get<std::string>();
}

bool opt_flag(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  if (!j[key].is_boolean()) throw InputError(std::string("tokenizer.json model field '") + key + "' must be a boolean");
  return j[key].get<bool>();
}

std::unique_ptr<TokenModel> make_bpe(const json& m, BpeVocab vocab, bool has_vocab) {
  if (!has_vocab) throw InputError("tokenizer.json: BPE model needs a 'vocab' object");
  if (m.contains("merges")) throw InputError("tokenizer.json: 'merges' must be an array of merges");
  BpeOptions o;
  o.unk_token = opt_string(m, "unk_token");
  o.fuse_unk = opt_flag(m, "fuse_unk");
  o.byte_fallback = opt_flag(m, "byte_fallback");
  o.ignore_merges = opt_flag(m, "ignore_merges");
  o.continuing_subword_prefix = opt_string(m, "continuing_subword_prefix").value_or("");
  o.end_of_word_suffix = opt_string(m, "end_of_word_suffix").value_or("");
  return std::make_unique<BpeModel>(std::move(vocab), std::move(o));
}

// Unigram's vocab is an array, so the streaming reader leaves it in the document.
std::unique_ptr<TokenModel> make_unigram(const json& m) {
  if (!m.contains("vocab") || !m["vocab"].is_array())
    throw InputError("tokenizer.json: Unigram model needs a 'vocab' array of [piece, score] pairs");
  const json& vocab = m["vocab"];
  if (vocab.empty()) throw InputError("tokenizer.json: Unigram vocab is empty");
  std::vector<std::string> pieces;
  std::vector<double> scores;
  pieces.reserve(vocab.size());
  scores.reserve(vocab.size());
  for (size_t i = 0; i < vocab.size(); ++i) {
    const json& e = vocab[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_string() || !e[1].is_number())
      throw InputError("tokenizer.json: Unigram vocab entry " + std::to_string(i) + " must be a [piece, score] pair");
    pieces.push_back(e[0].get<std::string>());
    scores.push_back(e[1].get<double>());
  }
  std::optional<int32_t> unk_id;
  if (m.contains("unk_id") && !m["unk_id"].is_null()) {
    if (!m["unk_id"].is_number_integer()) throw InputError("tokenizer.json: Unigram 'unk_id' must be an integer");
    const int64_t id = m["unk_id"].get<int64_t>();
    if (id < 0 || id >= int64_t(pieces.size()))
      throw InputError("tokenizer.json: Unigram unk_id " + std::to_string(id) + " is outside the vocabulary (" +
                       std::to_string(pieces.size()) + " pieces)");
    unk_id = int32_t(id);
  }
  return std::make_unique<UnigramModel>(std::move(pieces), std::move(scores), unk_id, opt_flag(m, "byte_fallback"));
}

std::unique_ptr<TokenModel> make_model(const json& m, TokenizerJsonParts& parts) {
  if (!m.is_object()) throw InputError("tokenizer.json: 'model' must be an object");
  std::string type = m.contains("type") && m["type"].is_string() ? m["type"].get<std::string>() : "BPE";
  if (type == "BPE") return make_bpe(m, std::move(parts.vocab), parts.has_vocab);
  if (type == "Unigram") return make_unigram(m);
  throw InputError("tokenizer.json: model type '" + type + "' is not supported (BPE and Unigram are)");
}

std::vector<AddedToken> parse_added(const json& j, int32_t model_max_id) {
  std::vector<AddedToken> out;
  if (j.is_null()) return out;
  if (!j.is_array()) throw InputError("tokenizer.json: 'added_tokens' must be an array");
  // Added tokens extend the model's vocabulary; an id far past that range is corrupt.
  const int64_t limit = int64_t(model_max_id) + 1 + int64_t(j.size());
  for (const auto& e : j) {
    if (!e.is_object() || !e.contains("content") || !e["content"].is_string() || !e.contains("id") ||
        !e["id"].is_number_integer())
      throw InputError("tokenizer.json: each added token needs a string 'content' and an integer 'id'");
    AddedToken t;
    t.content = e["content"].get<std::string>();
    int64_t id = e["id"].get<int64_t>();
    if (id < 0 || id >= limit)
      throw InputError("tokenizer.json: added token '" + t.content + "' has id " + std::to_string(id) +
                       ", outside the vocabulary (model vocabulary ends at " + std::to_string(model_max_id) + ", " +
                       std::to_string(j.size()) + " added tokens)");
    t.id = static_cast<int32_t>(id);
    auto b = [&](const char* k, bool d) { return e.contains(k) && e[k].is_boolean() ? e[k].get<bool>() : d; };
    t.special = b("special", false);
    t.lstrip = b("lstrip", false);
    t.rstrip = b("rstrip", false);
    t.single_word = b("single_word", false);
    t.normalized = b("normalized", !t.special);
    if (t.content.empty()) continue;
    out.push_back(std::move(t));
  }
  return out;
}

// bos_token / eos_token in tokenizer_config.json: a string, {"content": ...}, or null.
std::string config_token(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return "";
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_json_file(const std::string& json_path, const std::string& config_path) {
  std::string cfg = config_path.empty() ? std::string() : read_file(config_path);
  try {
    return from_json_text(read_file(json_path), cfg);
  } catch (const InputError& e) {
    throw InputError(json_path + ": " + e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_json_text(const std::string& tokenizer_json, const std::string& config_json) {
  TokenizerJsonParts parts = read_tokenizer_json(tokenizer_json);
  const json& j = parts.rest;
  if (!j.is_object() || !j.contains("model")) throw InputError("tokenizer.json: missing 'model'");
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->model_ = make_model(j["model"], parts);
  // Only byte-level BPE may read raw bytes in place of the ByteLevel pre-tokenizer's characters.
  const bool is_bpe = dynamic_cast<BpeModel*>(t->model_.get()) != nullptr;
  t->normalizer_ = make_normalizer(j.value("normalizer", json()));
  t->pre_tokenizer_ = make_pre_tokenizer(j.value("pre_tokenizer", json()));
  t->added_ = AddedVocabulary(parse_added(j.value("added_tokens", json()), t->model_->max_id()), t->normalizer_.get());
  t->decoder_ = make_decoder(j.value("decoder", json()));
  t->finish(is_bpe);
  auto lookup = [tp = t.get()](const std::string& s) { return tp->token_id(s); };
  t->post_processor_ = make_post_processor(j.value("post_processor", json()), lookup, t->vocab_size_);
  t->set_bos_eos_from_config(config_json);
  return t;
}

void Tokenizer::set_bos_eos_from_config(const std::string& config_json) {
  if (config_json.empty()) return;
  json cfg = parse(config_json, "tokenizer_config.json");
  bos_token_ = config_token(cfg, "bos_token");
  eos_token_ = config_token(cfg, "eos_token");
  if (!bos_token_.empty()) bos_id_ = token_id(bos_token_).value_or(-1);
  if (!eos_token_.empty()) eos_id_ = token_id(eos_token_).value_or(-1);
}

}  // namespace spark
