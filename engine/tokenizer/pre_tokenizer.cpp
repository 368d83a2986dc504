// pre_tokenizer.cpp — the tokenizer.json pre-tokenizers and their JSON factory.
#include "engine/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pattern.h"
#include "engine/tokenizer/unicode_props.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"

namespace spark {

using json = nlohmann::json;

void apply_split(const PreToken& piece, std::vector<SplitMark>& marks, SplitBehavior behavior,
                 std::vector<PreToken>& out) {
  // Merge the marks per behavior (all resulting pieces are kept), then drop empty ones.
  std::vector<std::pair<size_t, size_t>> kept;
  kept.reserve(marks.size());
  switch (behavior) {
    case SplitBehavior::REMOVED:
      for (auto& m : marks)
        if (!m.is_match) kept.emplace_back(m.start, m.end);
      break;
    case SplitBehavior::ISOLATED:
      for (auto& m : marks) kept.emplace_back(m.start, m.end);
      break;
    case SplitBehavior::MERGED_WITH_PREVIOUS: {
      bool prev_match = false;
      for (auto& m : marks) {
        if (m.is_match && !prev_match && !kept.empty()) kept.back().second = m.end;
        else kept.emplace_back(m.start, m.end);
        prev_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::MERGED_WITH_NEXT: {
      bool prev_match = false;
      for (size_t k = marks.size(); k-- > 0;) {
        auto& m = marks[k];
        if (m.is_match && !prev_match && !kept.empty()) kept.back().first = m.start;
        else kept.emplace_back(m.start, m.end);
        prev_match = m.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case SplitBehavior::CONTIGUOUS: {
      bool prev_match = false;
      bool first = true;
      for (auto& m : marks) {
        if (!first && m.is_match == prev_match) kept.back().second = m.end;
        else kept.emplace_back(m.start, m.end);
        prev_match = m.is_match;
        first = false;
      }
      break;
    }
  }
  for (auto [s, e] : kept) {
    if (s == e) continue;
    out.push_back(PreToken{piece.text.substr(s, e - s), piece.at_start && s == 0});
  }
}

namespace {

// Marks covering `text` from a list of matched ranges.
void marks_from_matches(size_t len, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
                        std::vector<SplitMark>& marks) {
  marks.clear();
  size_t prev = 0;
  for (auto [s, e] : matches) {
    if (prev != s) marks.push_back({prev, s, invert});
    marks.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != len) marks.push_back({prev, len, invert});
}

// Each character for which `pred` holds is a match of its own.
void marks_from_chars(const std::string& text, const std::function<bool(char32_t)>& pred,
                      std::vector<SplitMark>& marks) {
  marks.clear();
  size_t i = 0, run_start = 0;
  while (i < text.size()) {
    size_t s = i;
    char32_t cp = utf8::next(text, i);
    if (pred(cp)) {
      if (run_start != s) marks.push_back({run_start, s, false});
      marks.push_back({s, i, true});
      run_start = i;
    }
  }
  if (run_start != text.size()) marks.push_back({run_start, text.size(), false});
}

class SplitPre : public PreTokenizer {
 public:
  SplitPre(Pattern p, SplitBehavior b, bool invert) : pattern_(std::move(p)), behavior_(b), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    out.reserve(pieces.size() * 4);
    std::vector<std::pair<size_t, size_t>> matches;
    std::vector<SplitMark> marks;
    for (const auto& p : pieces) {
      matches.clear();
      pattern_.find_all(p.text, matches);
      marks_from_matches(p.text.size(), matches, invert_, marks);
      apply_split(p, marks, behavior_, out);
    }
    pieces.swap(out);
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class CharSplitPre : public PreTokenizer {
 public:
  CharSplitPre(std::function<bool(char32_t)> pred, SplitBehavior b) : pred_(std::move(pred)), behavior_(b) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    std::vector<SplitMark> marks;
    for (const auto& p : pieces) {
      marks_from_chars(p.text, pred_, marks);
      apply_split(p, marks, behavior_, out);
    }
    pieces.swap(out);
  }

 private:
  std::function<bool(char32_t)> pred_;
  SplitBehavior behavior_;
};

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool prefix, bool use_regex) : add_prefix_space_(prefix) {
    if (use_regex) regex_ = std::make_unique<Regex>(byte_level::GPT2_REGEX);
  }
  bool set_raw_bytes_output() override { return raw_bytes_ = true; }
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_)
      for (auto& p : pieces)
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
    if (regex_) {
      std::vector<PreToken> out;
      out.reserve(pieces.size() * 4);
      std::vector<std::pair<size_t, size_t>> matches;
      std::vector<SplitMark> marks;
      for (const auto& p : pieces) {
        matches.clear();
        regex_->find_all(p.text, matches);
        marks_from_matches(p.text.size(), matches, false, marks);
        apply_split(p, marks, SplitBehavior::ISOLATED, out);
      }
      pieces.swap(out);
    }
    if (!raw_bytes_)
      for (auto& p : pieces) p.text = byte_level::encode(p.text);
  }

 private:
  bool add_prefix_space_;
  bool raw_bytes_ = false;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { ALWAYS, FIRST, NEVER };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    std::vector<PreToken> out;
    std::vector<SplitMark> marks;
    std::vector<std::pair<size_t, size_t>> matches;
    const Pattern rep = Pattern::literal(replacement_);
    for (auto& p : pieces) {
      PreToken q{Pattern::literal(" ").replace_all(p.text, replacement_), p.at_start};
      bool starts = q.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::ALWAYS || (scheme_ == PrependScheme::FIRST && q.at_start)))
        q.text.insert(0, replacement_);
      if (!split_) {
        if (!q.text.empty()) out.push_back(std::move(q));
        continue;
      }
      matches.clear();
      rep.find_all(q.text, matches);
      marks_from_matches(q.text.size(), matches, false, marks);
      apply_split(q, marks, SplitBehavior::MERGED_WITH_NEXT, out);
    }
    pieces.swap(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> items) : items_(std::move(items)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& p : items_) p->pre_tokenize(pieces);
  }
  bool set_raw_bytes_output() override { return !items_.empty() && items_.back()->set_raw_bytes_output(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

SplitBehavior parse_behavior(const json& j) {
  std::string b = j.is_string() ? j.get<std::string>() : "";
  if (b == "Removed") return SplitBehavior::REMOVED;
  if (b == "Isolated") return SplitBehavior::ISOLATED;
  if (b == "MergedWithPrevious") return SplitBehavior::MERGED_WITH_PREVIOUS;
  if (b == "MergedWithNext") return SplitBehavior::MERGED_WITH_NEXT;
  if (b == "Contiguous") return SplitBehavior::CONTIGUOUS;
  throw InputError("tokenizer.json: unknown split behavior '" + b + "'");
}

bool flag(const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw InputError(std::string("tokenizer.json pre_tokenizer field '") + key + "' must be a boolean");
  return j[key].get<bool>();
}

PrependScheme parse_scheme(const std::string& s) {
  if (s == "always") return PrependScheme::ALWAYS;
  if (s == "first") return PrependScheme::FIRST;
  if (s == "never") return PrependScheme::NEVER;
  throw InputError("tokenizer.json: unknown Metaspace prepend_scheme '" + s + "'");
}

std::string first_char(const json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_string() || j[key].get<std::string>().empty())
    throw InputError(std::string("tokenizer.json: field '") + key + "' must be a one-character string");
  std::string s = j[key].get<std::string>();
  size_t i = 0;
  utf8::next(s, i);
  return s.substr(0, i);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_split_regex(const std::string& regex, SplitBehavior behavior, bool invert) {
  return std::make_unique<SplitPre>(Pattern::regex(regex), behavior, invert);
}
std::unique_ptr<PreTokenizer> make_byte_level(bool add_prefix_space, bool use_regex) {
  return std::make_unique<ByteLevelPre>(add_prefix_space, use_regex);
}
std::unique_ptr<PreTokenizer> make_digits(bool individual) {
  return std::make_unique<CharSplitPre>(is_numeric, individual ? SplitBehavior::ISOLATED : SplitBehavior::CONTIGUOUS);
}
std::unique_ptr<PreTokenizer> make_metaspace(const std::string& replacement, const std::string& scheme, bool split) {
  return std::make_unique<MetaspacePre>(replacement, parse_scheme(scheme), split);
}
std::unique_ptr<PreTokenizer> make_sequence(std::vector<std::unique_ptr<PreTokenizer>> items) {
  return std::make_unique<SequencePre>(std::move(items));
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j) {
  if (j.is_null()) return nullptr;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw InputError("tokenizer.json: pre_tokenizer must be an object with a string 'type'");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      throw InputError("tokenizer.json pre_tokenizer Sequence needs a 'pretokenizers' array");
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (const auto& p : j["pretokenizers"])
      if (auto made = make_pre_tokenizer(p)) items.push_back(std::move(made));
    return make_sequence(std::move(items));
  }
  if (type == "Split") {
    if (!j.contains("pattern")) throw InputError("tokenizer.json pre_tokenizer Split needs 'pattern'");
    Pattern p = Pattern::from_json(j["pattern"], "pre_tokenizer Split");
    // A literal pattern is matched as an escaped regex in the reference: same matches.
    return std::make_unique<SplitPre>(std::move(p), parse_behavior(j.value("behavior", json("Isolated"))),
                                      flag(j, "invert", false));
  }
  if (type == "ByteLevel") return make_byte_level(flag(j, "add_prefix_space", true), flag(j, "use_regex", true));
  if (type == "Digits") return make_digits(flag(j, "individual_digits", false));
  if (type == "Metaspace") {
    std::string scheme = "always";
    if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) scheme = j["prepend_scheme"].get<std::string>();
    else if (j.contains("add_prefix_space")) scheme = flag(j, "add_prefix_space", true) ? "always" : "never";
    return make_metaspace(first_char(j, "replacement", "\xE2\x96\x81"), scheme, flag(j, "split", true));
  }
  if (type == "Whitespace") return make_split_regex("\\w+|[^\\w\\s]+", SplitBehavior::REMOVED, true);
  if (type == "WhitespaceSplit") return std::make_unique<CharSplitPre>(is_white_space, SplitBehavior::REMOVED);
  if (type == "Punctuation") {
    auto b = j.contains("behavior") ? parse_behavior(j["behavior"]) : SplitBehavior::ISOLATED;
    return std::make_unique<CharSplitPre>(is_punctuation_char, b);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> items;
    items.push_back(std::make_unique<CharSplitPre>(is_white_space, SplitBehavior::REMOVED));
    items.push_back(std::make_unique<CharSplitPre>(is_punctuation_char, SplitBehavior::ISOLATED));
    return make_sequence(std::move(items));
  }
  if (type == "CharDelimiterSplit") {
    std::string d = first_char(j, "delimiter", "");
    size_t i = 0;
    char32_t cp = utf8::next(d, i);
    return std::make_unique<CharSplitPre>([cp](char32_t c) { return c == cp; }, SplitBehavior::REMOVED);
  }
  throw InputError("tokenizer.json: unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace spark
