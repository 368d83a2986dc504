// tokenizer.cpp — the encode and decode pipelines and the path-based loader.
#include "engine/tokenizer/tokenizer.h"

#include <filesystem>

#include "engine/model/gguf.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/token_model.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"

namespace spark {

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::finish(bool raw_bytes_allowed) {
  // Byte-level BPE whose last pre-tokenizer stage is ByteLevel can skip the byte -> character
  // mapping: the model is then keyed by raw bytes.
  if (raw_bytes_allowed && pre_tokenizer_ && pre_tokenizer_->set_raw_bytes_output()) model_->use_raw_bytes();
  int32_t max_id = model_->max_id();
  for (const auto& t : added_.tokens()) max_id = std::max(max_id, t.id);
  vocab_size_ = max_id + 1;
  if (decoder_) {
    WindowCheck check;
    decoder_->check_window(check);
    decodes_in_window_ = check.exact;
    byte_fallback_ = check.byte_fallback;
  }
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    fs::path dir(path);
    if (!fs::exists(dir / "tokenizer.json", ec)) {
      // A folder holding a single GGUF is accepted too.
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().extension() == ".gguf") return load(e.path().string());
      throw InputError("no tokenizer.json in model folder " + path);
    }
    fs::path cfg = dir / "tokenizer_config.json";
    return from_json_file((dir / "tokenizer.json").string(), fs::exists(cfg, ec) ? cfg.string() : "");
  }
  if (!fs::exists(path, ec)) throw InputError("model path does not exist: " + path);
  if (fs::path(path).extension() == ".gguf") return from_gguf_vocab(read_gguf_vocab(path));
  if (fs::path(path).filename() == "tokenizer.json") {
    fs::path cfg = fs::path(path).parent_path() / "tokenizer_config.json";
    return from_json_file(path, fs::exists(cfg, ec) ? cfg.string() : "");
  }
  throw InputError("model path must be a folder with tokenizer.json or a .gguf file: " + path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens, bool parse_special) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::repair(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  added_.split(text, parse_special, normalizer_.get(), segments);
  std::vector<PreToken> pieces;
  for (Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    if (!pre_tokenizer_) {
      model_->tokenize(seg.text.text, ids);
      continue;
    }
    pieces.clear();
    pieces.push_back(std::move(seg.text));
    pre_tokenizer_->pre_tokenize(pieces);
    for (const auto& p : pieces) model_->tokenize(p.text, ids);
  }
  if (post_processor_) post_processor_->process(ids, add_special_tokens);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_pair(std::string_view a, std::string_view b, bool add_special_tokens) const {
  std::vector<int32_t> ids = encode(a, false);
  const std::vector<int32_t> second = encode(b, false);
  if (post_processor_) {
    post_processor_->process_pair(ids, second, add_special_tokens);
  } else {
    ids.insert(ids.end(), second.begin(), second.end());
  }
  return ids;
}

namespace {

// The text decode() starts from for `id`; null when it drops the id.
const std::string* decoder_text(const AddedVocabulary& added, const TokenModel& model, int32_t id,
                                bool skip_special_tokens) {
  const std::string* text = nullptr;
  if (const AddedToken* t = added.find_id(id)) text = &t->decoded;
  else text = model.id_to_token(id);
  if (text && skip_special_tokens && added.is_special_content(*text)) return nullptr;
  return text;
}

// decoder_text of every id, dropped ones left out. The lookup is spelled out again rather
// than called: this loop runs for every streamed token and the call did not get inlined.
std::vector<std::string> decoder_texts(const AddedVocabulary& added, const TokenModel& model,
                                       const std::vector<int32_t>& ids, bool skip_special_tokens) {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* text = nullptr;
    if (const AddedToken* t = added.find_id(id)) text = &t->decoded;
    else text = model.id_to_token(id);
    if (!text) continue;
    if (skip_special_tokens && added.is_special_content(*text)) continue;
    tokens.push_back(*text);
  }
  return tokens;
}

}  // namespace

bool Tokenizer::decodes_to_nothing(int32_t id, bool skip_special_tokens) const {
  return decoder_text(added_, *model_, id, skip_special_tokens) == nullptr;
}

bool Tokenizer::is_fallback_byte(int32_t id) const {
  if (!byte_fallback_) return false;
  const std::string* text = decoder_text(added_, *model_, id, false);
  return text && parse_byte_token(*text) >= 0;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens = decoder_texts(added_, *model_, ids, skip_special_tokens);
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::string Tokenizer::decode_open(const std::vector<int32_t>& ids, bool skip_special_tokens, size_t& stable) const {
  if (!decoder_) {
    // Joining with spaces only ever appends.
    std::string out = decode(ids, skip_special_tokens);
    stable = out.size();
    return out;
  }
  std::vector<std::string> tokens = decoder_texts(added_, *model_, ids, skip_special_tokens);
  StablePrefix prefix{tokens.size(), 0};
  decoder_->decode_open(tokens, prefix);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i == prefix.tokens) stable = out.size() + std::min(prefix.bytes, tokens[i].size());
    out += tokens[i];
  }
  if (prefix.tokens >= tokens.size()) stable = out.size();
  return out;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* t = added_.find_id(id);
  return t && t->special;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const AddedToken* t = added_.find_content(token)) return t->id;
  return model_->token_to_id(token);
}

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string empty;
  if (const AddedToken* t = added_.find_id(id)) return t->content;
  const std::string* s = model_->id_to_token(id);
  return s ? *s : empty;
}

}  // namespace spark
