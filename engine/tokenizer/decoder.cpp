// decoder.cpp — the tokenizer.json decoders and their JSON factory.
#include "engine/tokenizer/decoder.h"

#include <algorithm>
#include <cctype>
#include <string_view>

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

// ---- helpers for decode_open ----------------------------------------------------------

size_t bytes_before(const std::vector<std::string>& tokens, size_t count) {
  size_t n = 0;
  for (size_t i = 0; i < count; ++i) n += tokens[i].size();
  return n;
}

// True when `prefix` may still grow into a "<0xNN>" byte token.
bool could_be_byte_token(std::string_view prefix) {
  static constexpr std::string_view shape = "<0x";
  if (prefix.size() > 6) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    char c = prefix[i];
    bool fits = i < 3 ? c == shape[i] : i < 5 ? std::isxdigit(static_cast<unsigned char>(c)) != 0 : c == '>';
    if (!fits) return false;
  }
  return true;
}

// The longest whole-character prefix of the first `known` bytes of `s`.
size_t whole_chars(std::string_view s, size_t known) {
  size_t i = 0;
  while (i < known) {
    size_t n = utf8::seq_len(static_cast<unsigned char>(s[i]));
    if (i + n > known) break;
    i += n;
  }
  return i;
}

// `known` less a trailing multi-byte sequence that later bytes could still complete; what
// comes before it repairs the same whatever follows.
size_t complete_sequences(std::string_view s, size_t known) {
  for (size_t back = 1; back <= 3 && back <= known; ++back) {
    unsigned char c = static_cast<unsigned char>(s[known - back]);
    if (c < 0x80) break;
    if (c >= 0xC0) return known - back + utf8::seq_len(c) > known ? known - back : known;
  }
  return known;
}

// Leading bytes of `text` with every `from` replaced (leftmost, non-overlapping) that stay
// the same however the bytes of `text` past `known` change or grow.
size_t replaced_stable(std::string_view text, size_t known, std::string_view from, size_t to_size) {
  if (from.empty()) return known;  // an empty literal never matches
  size_t out = 0, pos = 0;
  for (;;) {
    size_t m = text.find(from, pos);
    if (m == std::string_view::npos || m + from.size() > known) break;
    out += m - pos + to_size;
    pos = m + from.size();
  }
  // A match may still start wherever it would reach past the known bytes.
  size_t open = known >= from.size() ? known - from.size() + 1 : 0;
  return open > pos ? out + (open - pos) : out;
}

// Leading bytes of `text` before its first `from`, counting only matches the known bytes
// settle: the part a replacement of `from` by anything leaves alone.
size_t before_first(std::string_view text, size_t known, bool complete, std::string_view from) {
  if (from.empty()) return known;
  size_t open = complete ? text.size() : known >= from.size() ? known - from.size() + 1 : 0;
  return std::min(text.find(from), open);
}

// ---- decoders -------------------------------------------------------------------------

// Tokens become the bytes their characters stand for; a token with a character outside
// the byte alphabet (an added token) contributes its own UTF-8. Ill-formed results are
// repaired with U+FFFD.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) append_bytes(bytes, t);
    tokens.assign(1, utf8::repair_copy(bytes));
  }
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    std::string bytes;
    size_t known = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      append_bytes(bytes, tokens[i]);
      if (i + 1 == stable.tokens) known = bytes.size();
    }
    known = complete_sequences(bytes, known);
    stable = {0, utf8::repair(std::string_view(bytes).substr(0, known)).size()};
    tokens.assign(1, utf8::repair_copy(bytes));
  }
  void check_window(WindowCheck& c) const override {
    if (c.fused) c.exact = false;
    c.fused = true;
  }

 private:
  static void append_bytes(std::string& bytes, const std::string& token) {
    if (auto raw = byte_level::decode(token)) bytes += *raw;
    else bytes += token;
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
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    if (stable.bytes > 0) {
      const std::string& t = tokens[stable.tokens];
      bool strip = stable.tokens == 0 && strip_first_;
      size_t out = 0, k = 0;
      while (k < stable.bytes) {
        if (k + rep_.size() > stable.bytes) {
          // The known bytes may be the start of a replacement: undecided.
          if (rep_.compare(0, stable.bytes - k, t, k, stable.bytes - k) == 0) break;
          ++out, ++k;
        } else if (t.compare(k, rep_.size(), rep_) == 0) {
          out += strip ? 0 : 1;
          k += rep_.size();
        } else {
          ++out, ++k;
        }
      }
      stable.bytes = out;
    }
    decode_chain(tokens);
  }
  void check_window(WindowCheck& c) const override {
    if (c.fused || (c.drops && strip_first_)) c.exact = false;
    c.rewrites = true;
    c.first_differs |= strip_first_;
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
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    if (stable.bytes > 0)
      // A regex may match any stretch of what is still to come.
      stable.bytes = pattern_.is_literal() ? replaced_stable(tokens[stable.tokens], stable.bytes,
                                                             pattern_.literal_text(), content_.size())
                                           : 0;
    decode_chain(tokens);
  }
  void check_window(WindowCheck& c) const override {
    if (c.fused) c.exact = false;
    if (!keeps_byte_tokens()) c.rewrites = true;
  }

 private:
  // True when the replacement can neither touch a <0xNN> token nor produce one: both the
  // literal and the content hold a character that no byte token has.
  bool keeps_byte_tokens() const {
    auto foreign = [](std::string_view s) {
      return s.find_first_not_of("<>0123456789abcdefABCDEFx") != std::string_view::npos;
    };
    return pattern_.is_literal() && foreign(pattern_.literal_text()) && foreign(content_);
  }

  Pattern pattern_;
  std::string content_;
};

// Consecutive <0xNN> tokens form a byte string; if it is not valid UTF-8 each byte becomes
// one U+FFFD, as in the reference.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override { group(tokens, nullptr); }
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    // A run of byte tokens at the end of the known tokens may still grow, and the whole run
    // turns into U+FFFDs if it ends up invalid.
    size_t settled = stable.tokens;
    while (settled > 0 && parse_byte_token(tokens[settled - 1]) >= 0) --settled;
    bool passes = settled == stable.tokens && stable.bytes > 0 &&
                  !could_be_byte_token(std::string_view(tokens[settled]).substr(0, stable.bytes));
    StablePrefix out{settled, 0};
    group(tokens, &out.tokens);
    if (passes) out.bytes = stable.bytes;
    stable = out;
  }
  void check_window(WindowCheck& c) const override {
    if (c.fused || c.rewrites) c.exact = false;
    c.byte_fallback = true;
    c.rewrites = true;  // a byte run may decode to text that reads as "<0xNN>"
  }

 private:
  // Joins byte runs. `mark`, when given, is an input position that no byte run crosses; it
  // is replaced by the matching output position.
  static void group(std::vector<std::string>& tokens, size_t* mark) {
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
    size_t at = mark ? *mark : 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (mark && i == at) *mark = out.size();
      int b = parse_byte_token(tokens[i]);
      if (b >= 0) {
        pending.push_back(static_cast<char>(b));
        continue;
      }
      flush();
      out.push_back(std::move(tokens[i]));
    }
    flush();
    if (mark && at >= tokens.size()) *mark = out.size();
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
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    size_t known = bytes_before(tokens, stable.tokens) + stable.bytes;
    decode_chain(tokens);
    stable = {0, known};
  }
  void check_window(WindowCheck& c) const override { c.fused = true; }
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
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    if (stable.bytes > 0) stable.bytes = stable_strip(tokens[stable.tokens], stable.bytes);
    decode_chain(tokens);
  }
  void check_window(WindowCheck& c) const override {
    // On the joined text, stripping one leading character is decided by the context token
    // alone (the detokenizer keeps that token non-empty); more, or a trailing strip, is not.
    if (c.fused) {
      if (c.stripped_fused || start_ > 1 || stop_ > 0) c.exact = false;
      c.stripped_fused = true;
    }
    c.rewrites = true;
  }

 private:
  // Bytes of the stripped token that its first `known` bytes settle.
  size_t stable_strip(std::string_view t, size_t known) const {
    known = whole_chars(t, known);
    std::vector<std::pair<size_t, char32_t>> chars;
    for (size_t i = 0; i < known;) {
      size_t s = i;
      chars.emplace_back(s, utf8::next(t, i));
    }
    size_t lead = 0;
    while (lead < chars.size() && lead < start_ && chars[lead].second == content_) ++lead;
    if (lead == chars.size() && lead < start_) return 0;  // the leading cut is not decided yet
    size_t end = chars.size();
    // A trailing run of `content_` may turn out to be the token's end.
    if (stop_ > 0)
      while (end > lead && chars[end - 1].second == content_) --end;
    if (end <= lead) return 0;
    size_t e = end < chars.size() ? chars[end].first : known;
    return e - chars[lead].first;
  }

  char32_t content_;
  size_t start_, stop_;
};

constexpr std::pair<std::string_view, std::string_view> CLEANUP_RULES[] = {
    {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
    {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};

std::string cleanup_spaces(std::string s) {
  for (auto [from, to] : CLEANUP_RULES) s = Pattern::literal(std::string(from)).replace_all(s, to);
  return s;
}

// cleanup_spaces of a string whose first `known` bytes are final: returns how many leading
// bytes of the result are; `s` becomes cleanup_spaces(s).
size_t cleanup_spaces_stable(std::string& s, size_t known) {
  for (auto [from, to] : CLEANUP_RULES) {
    known = replaced_stable(s, known, from, to.size());
    s = Pattern::literal(std::string(from)).replace_all(s, to);
  }
  return known;
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
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    if (stable.bytes > 0) stable.bytes = stable_piece(tokens[stable.tokens], stable.bytes, stable.tokens == 0);
    decode_chain(tokens);
  }
  void check_window(WindowCheck& c) const override {
    if (c.fused || c.drops) c.exact = false;
    c.rewrites = true;
    c.first_differs = true;
  }

 private:
  size_t stable_piece(std::string_view t, size_t known, bool first) const {
    std::string s(t.substr(0, known));
    if (!first) {
      if (known < prefix_.size() && prefix_.compare(0, known, s) == 0) return 0;  // prefix or not: undecided
      if (s.compare(0, prefix_.size(), prefix_) == 0) s.erase(0, prefix_.size());
      else s.insert(0, 1, ' ');
    }
    return cleanup_ ? cleanup_spaces_stable(s, s.size()) : s.size();
  }

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
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    // Whether a string is the last one decides how its suffixes read, so only the text before
    // the first suffix of the next-to-settle string is final.
    StablePrefix out;
    if (stable.bytes > 0) {
      out = {stable.tokens, before_first(tokens[stable.tokens], stable.bytes, false, suffix_)};
    } else if (stable.tokens > 0) {
      const std::string& t = tokens[stable.tokens - 1];
      out = {stable.tokens - 1, before_first(t, t.size(), true, suffix_)};
    }
    decode_chain(tokens);
    stable = out;
  }
  void check_window(WindowCheck& c) const override { c.exact = false; }

 private:
  std::string suffix_;
};

class CtcDecoder : public Decoder {
 public:
  CtcDecoder(std::string pad, std::string delim, bool cleanup) : pad_(std::move(pad)), delim_(std::move(delim)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override { collapse(tokens, nullptr); }
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    // A string is dropped when it repeats the one before it or decodes to nothing, which the
    // part of it known so far cannot tell: only whole known strings are final.
    StablePrefix out{stable.tokens, 0};
    collapse(tokens, &out.tokens);
    stable = out;
  }
  void check_window(WindowCheck& c) const override {
    // Repeats are judged against the previous string, which for the context token was
    // rendered as a first string in the window but not in the whole sequence.
    if (c.fused || c.drops || c.first_differs) c.exact = false;
    c.drops = true;
    c.rewrites = true;
  }

 private:
  // `mark`, when given, is an input position; it is replaced by the matching output position.
  void collapse(std::vector<std::string>& tokens, size_t* mark) const {
    std::vector<std::string> out;
    size_t at = mark ? *mark : 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (mark && i == at) *mark = out.size();
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;
      std::string t = Pattern::literal(pad_).replace_all(tokens[i], "");
      if (cleanup_) t = Pattern::literal(delim_).replace_all(cleanup_spaces(t), " ");
      if (!t.empty()) out.push_back(std::move(t));
    }
    if (mark && at >= tokens.size()) *mark = out.size();
    tokens.swap(out);
  }

  std::string pad_, delim_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> d) : items_(std::move(d)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) d->decode_chain(tokens);
  }
  void decode_open(std::vector<std::string>& tokens, StablePrefix& stable) const override {
    for (const auto& d : items_) d->decode_open(tokens, stable);
  }
  void check_window(WindowCheck& c) const override {
    for (const auto& d : items_) d->check_window(c);
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
    if (rep.empty()) throw InputError("tokenizer.json decoder Metaspace needs a non-empty 'replacement'");
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
