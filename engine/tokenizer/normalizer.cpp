// normalizer.cpp — the tokenizer.json normalizers and their JSON factory.
#include "engine/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/precompiled_charsmap.h"
#include "engine/tokenizer/unicode_props.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"

namespace spark {

using json = nlohmann::json;

void unicode_normalize(std::string& text, UnicodeForm form) {
  // Fast paths: ASCII is invariant under every form; text below U+0300 is already NFC.
  bool below_300 = true, ascii = true;
  for (unsigned char c : text) {
    if (c >= 0x80) ascii = false;
    if (c >= 0xCC) { below_300 = false; break; }
  }
  if (ascii || (below_300 && form == UnicodeForm::NFC)) return;
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) return;  // only on invalid UTF-8, which the tokenizer repairs before this point
  text.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
}

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm f) : form_(f) {}
  void normalize(std::string& t) const override { unicode_normalize(t, form_); }

 private:
  UnicodeForm form_;
};

// Rust's char::to_lowercase: the full mapping, where only U+0130 expands to two characters.
void lowercase(std::string& t) {
  std::string out;
  out.reserve(t.size());
  size_t i = 0;
  while (i < t.size()) {
    unsigned char c = static_cast<unsigned char>(t[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
      ++i;
      continue;
    }
    char32_t cp = utf8::next(t, i);
    if (cp == 0x130) {
      out += "i\xCC\x87";
      continue;
    }
    utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
  }
  t.swap(out);
}

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& t) const override { lowercase(t); }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& t) const override {
    size_t b = 0, e = t.size();
    if (left_) {
      while (b < e) {
        size_t j = b;
        if (!is_white_space(utf8::next(t, j))) break;
        b = j;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(t[s]) & 0xC0) == 0x80) --s;
        size_t j = s;
        if (!is_white_space(utf8::next(t, j))) break;
        e = s;
      }
    }
    t = t.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

// StripAccents drops every mark; BERT's accent stripping drops only nonspacing ones (Mn).
void strip_marks(std::string& t, bool nonspacing_only = false) {
  std::string out;
  out.reserve(t.size());
  size_t i = 0;
  while (i < t.size()) {
    size_t s = i;
    char32_t cp = utf8::next(t, i);
    bool drop = nonspacing_only ? is_nonspacing_mark(cp) : is_mark(cp);
    if (!drop) out.append(t, s, i - s);
  }
  t.swap(out);
}

class StripAccentsNormalizer : public Normalizer {
 public:
  void normalize(std::string& t) const override { strip_marks(t); }
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern p, std::string content) : pattern_(std::move(p)), content_(std::move(content)) {}
  void normalize(std::string& t) const override { t = pattern_.replace_all(t, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prefix_(std::move(p)) {}
  void normalize(std::string& t) const override {
    if (!t.empty()) t.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// BERT's cleanup: drop control characters, map whitespace to ' ', space out CJK ideographs,
// optionally strip accents and lowercase.
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  void normalize(std::string& t) const override {
    std::string out;
    out.reserve(t.size());
    size_t i = 0;
    while (i < t.size()) {
      char32_t cp = utf8::next(t, i);
      if (clean_) {
        if (cp == 0 || cp == 0xFFFD || (cp != '\t' && cp != '\n' && cp != '\r' && is_other(cp))) continue;
        if (is_white_space(cp)) cp = ' ';
      }
      if (chinese_ && is_cjk_ideograph(cp)) {
        out += ' ';
        utf8::append(out, cp);
        out += ' ';
        continue;
      }
      utf8::append(out, cp);
    }
    if (strip_) {
      unicode_normalize(out, UnicodeForm::NFD);
      strip_marks(out, true);
    }
    if (lower_) lowercase(out);
    t.swap(out);
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

// SentencePiece's compiled normalization rules (nmt_nfkc and the like), as Unigram models ship them.
class PrecompiledNormalizer : public Normalizer {
 public:
  PrecompiledNormalizer(std::string_view blob, const std::string& field) : charsmap_(blob, field) {}
  void normalize(std::string& t) const override { charsmap_.normalize(t); }

 private:
  PrecompiledCharsmap charsmap_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> n) : items_(std::move(n)) {}
  void normalize(std::string& t) const override {
    for (const auto& n : items_) n->normalize(t);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

bool flag(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw InputError(std::string("tokenizer.json normalizer field '") + key + "' must be a boolean");
  return j[key].get<bool>();
}

std::string text_field(const json& j, const char* key, const std::string& type) {
  if (!j.contains(key) || !j[key].is_string())
    throw InputError("tokenizer.json normalizer " + type + " needs a string field '" + key + "'");
  return j[key].get<std::string>();
}

}  // namespace

std::unique_ptr<Normalizer> make_replace_normalizer(const std::string& from, const std::string& to) {
  return std::make_unique<ReplaceNormalizer>(Pattern::literal(from), to);
}

std::unique_ptr<Normalizer> make_prepend_normalizer(const std::string& prefix) {
  return std::make_unique<PrependNormalizer>(prefix);
}

std::unique_ptr<Normalizer> make_sequence_normalizer(std::vector<std::unique_ptr<Normalizer>> items) {
  return std::make_unique<SequenceNormalizer>(std::move(items));
}

std::unique_ptr<Normalizer> make_precompiled_normalizer(std::string_view charsmap, const std::string& field) {
  return std::make_unique<PrecompiledNormalizer>(charsmap, field);
}

std::unique_ptr<Normalizer> make_normalizer(const json& j) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw InputError("tokenizer.json: normalizer must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Strip") return std::make_unique<StripNormalizer>(flag(j, "strip_left", true), flag(j, "strip_right", true));
  if (type == "Replace") {
    if (!j.contains("pattern")) throw InputError("tokenizer.json normalizer Replace needs 'pattern'");
    return std::make_unique<ReplaceNormalizer>(Pattern::from_json(j["pattern"], "normalizer Replace"),
                                               text_field(j, "content", type));
  }
  if (type == "Precompiled") {
    const std::string field = "tokenizer.json normalizer Precompiled field 'precompiled_charsmap'";
    if (!j.contains("precompiled_charsmap") || !j["precompiled_charsmap"].is_string())
      throw InputError(field + " must be a base64 string");
    return make_precompiled_normalizer(decode_base64(j["precompiled_charsmap"].get_ref<const std::string&>(), field), field);
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(text_field(j, "prepend", type));
  if (type == "BertNormalizer") {
    bool lower = flag(j, "lowercase", true);
    return std::make_unique<BertNormalizer>(flag(j, "clean_text", true), flag(j, "handle_chinese_chars", true),
                                            flag(j, "strip_accents", lower), lower);
  }
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      throw InputError("tokenizer.json normalizer Sequence needs a 'normalizers' array");
    std::vector<std::unique_ptr<Normalizer>> items;
    for (const auto& n : j["normalizers"]) {
      auto made = make_normalizer(n);
      if (made) items.push_back(std::move(made));
    }
    return std::make_unique<SequenceNormalizer>(std::move(items));
  }
  throw InputError("tokenizer.json: unsupported normalizer type '" + type + "'");
}

}  // namespace spark
