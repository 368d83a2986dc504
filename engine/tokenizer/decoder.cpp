// decoder.cpp — the tokenizer.json decoders and their JSON factory.
#include "engine/tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"

namespace spark {

using json = nlohmann::json;

int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

namespace {

// Tokens become the bytes their characters stand for; a token with a character outside
// the byte alphabet (an added token) contributes its own UTF-8. Ill-formed results are
// repaired with U+FFFD.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      if (auto raw = byte_level::decode(t)) bytes += *raw;
      else bytes += t;
    }
    tokens.assign(1, utf8::repair_copy(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string rep, bool strip_first) : rep_(std::move(rep)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      size_t k = 0;
      while (k < t.size()) {
        if (t.compare(k, rep_.size(), rep_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';
          k += rep_.size();
        } else {
          out += t[k++];
        }
      }
      tokens[i].swap(out);
    }
  }

 private:
  std::string rep_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern p, std::string c) : pattern_(std::move(p)), content_(std::move(c)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Consecutive <0xNN> tokens form a byte string; if it is not valid UTF-8 each byte becomes
// one U+FFFD, as in the reference.
class ByteFallbackDecoder : public Decoder {
 public:
  bool has_byte_fallback() const override { return true; }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&]() {
      if (pending.empty()) return;
      if (utf8::is_valid(pending)) out.push_back(pending);
      else
        for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
      pending.clear();
    };
    for (auto& t : tokens) {
      int b = parse_byte_token(t);
      if (b >= 0) {
        pending.push_back(static_cast<char>(b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t c, size_t start, size_t stop) : content_(c), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // byte offset, code point
      size_t i = 0;
      while (i < t.size()) {
        size_t s = i;
        chars.emplace_back(s, utf8::next(t, i));
      }
      size_t start_cut = 0;
      for (size_t k = 0; k < chars.size() && k < start_; ++k) {
        if (chars[k].second != content_) break;
        start_cut = k + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t k = 0; k < chars.size() && k < stop_; ++k) {
        if (chars[chars.size() - 1 - k].second != content_) break;
        stop_cut = chars.size() - k - 1;
      }
      if (start_cut >= stop_cut) {
        t.clear();
        continue;
      }
      size_t b = chars[start_cut].first;
      size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

std::string cleanup_spaces(std::string s) {
  static const std::pair<const char*, const char*> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : rules) s = Pattern::literal(from).replace_all(s, to);
  return s;
}

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
        else t.insert(0, 1, ' ');
      }
      if (cleanup_) t = cleanup_spaces(t);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = Pattern::literal(suffix_).replace_all(tokens[i], i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class CtcDecoder : public Decoder {
 public:
  CtcDecoder(std::string pad, std::string delim, bool cleanup) : pad_(std::move(pad)), delim_(std::move(delim)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;
      std::string t = Pattern::literal(pad_).replace_all(tokens[i], "");
      if (cleanup_) t = Pattern::literal(delim_).replace_all(cleanup_spaces(t), " ");
      if (!t.empty()) out.push_back(std::move(t));
    }
    tokens.swap(out);
  }

 private:
  std::string pad_, delim_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> d) : items_(std::move(d)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) d->decode_chain(tokens);
  }
  bool has_byte_fallback() const override {
    for (const auto& d : items_)
      if (d->has_byte_fallback()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

std::string str(const json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) throw InputError(std::string("tokenizer.json decoder field '") + key + "' must be a string");
  return j[key].get<std::string>();
}

bool flag(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw InputError(std::string("tokenizer.json decoder field '") + key + "' must be a boolean");
  return j[key].get<bool>();
}

size_t count(const json& j, const char* key) {
  if (!j.contains(key)) return 0;
  if (!j[key].is_number_unsigned()) throw InputError(std::string("tokenizer.json decoder field '") + key + "' must be a count");
  return j[key].get<size_t>();
}

}  // namespace

std::unique_ptr<Decoder> make_byte_level_decoder() { return std::make_unique<ByteLevelDecoder>(); }

std::unique_ptr<Decoder> make_sentencepiece_decoder(bool strip_leading_space) {
  std::vector<std::unique_ptr<Decoder>> items;
  items.push_back(std::make_unique<ReplaceDecoder>(Pattern::literal("\xE2\x96\x81"), " "));
  items.push_back(std::make_unique<ByteFallbackDecoder>());
  items.push_back(std::make_unique<FuseDecoder>());
  if (strip_leading_space) items.push_back(std::make_unique<StripDecoder>(U' ', 1, 0));
  return std::make_unique<SequenceDecoder>(std::move(items));
}

std::unique_ptr<Decoder> make_decoder(const json& j) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw InputError("tokenizer.json: decoder must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return make_byte_level_decoder();
  if (type == "Metaspace") {
    std::string rep = str(j, "replacement", "\xE2\x96\x81");
    std::string scheme = "always";
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) scheme = j["prepend_scheme"].get<std::string>();
    else if (j.contains("add_prefix_space")) scheme = flag(j, "add_prefix_space", true) ? "always" : "never";
    return std::make_unique<MetaspaceDecoder>(rep, scheme != "never");
  }
  if (type == "Replace") {
    if (!j.contains("pattern")) throw InputError("tokenizer.json decoder Replace needs 'pattern'");
    return std::make_unique<ReplaceDecoder>(Pattern::from_json(j["pattern"], "decoder Replace"), str(j, "content", ""));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    std::string c = str(j, "content", " ");
    size_t i = 0;
    char32_t cp = c.empty() ? U' ' : utf8::next(c, i);
    return std::make_unique<StripDecoder>(cp, count(j, "start"), count(j, "stop"));
  }
  if (type == "WordPiece") return std::make_unique<WordPieceDecoder>(str(j, "prefix", "##"), flag(j, "cleanup", true));
  if (type == "BPEDecoder") return std::make_unique<BpeSuffixDecoder>(str(j, "suffix", "</w>"));
  if (type == "CTC")
    return std::make_unique<CtcDecoder>(str(j, "pad_token", "<pad>"), str(j, "word_delimiter_token", "|"), flag(j, "cleanup", true));
  if (type == "Sequence") {
    if (!j.contains("decoders") || !j["decoders"].is_array())
      throw InputError("tokenizer.json decoder Sequence needs a 'decoders' array");
    std::vector<std::unique_ptr<Decoder>> items;
    for (const auto& d : j["decoders"])
      if (auto made = make_decoder(d)) items.push_back(std::move(made));
    return std::make_unique<SequenceDecoder>(std::move(items));
  }
  throw InputError("tokenizer.json: unsupported decoder type '" + type + "'");
}

}  // namespace spark
