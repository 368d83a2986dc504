// added_tokens.cpp — leftmost-longest added-token matching and the split around matches.
#include "engine/tokenizer/added_tokens.h"

#include <algorithm>

#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/unicode_props.h"
#include "engine/tokenizer/utf8.h"

namespace spark {

namespace {

// Unicode \w as Rust's regex crate defines it (alphabetic, marks, decimal digits, connectors).
bool is_word_char(char32_t cp) {
  if (cp < 0x80) return cp == '_' || (cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z');
  return is_alphanumeric(cp) || is_mark(cp) || cp == 0x200C || cp == 0x200D ||
         (is_punctuation(cp) && (cp == 0x203F || cp == 0x2040 || cp == 0x2054 || cp == 0xFE33 || cp == 0xFE34 ||
                                 (cp >= 0xFE4D && cp <= 0xFE4F) || cp == 0xFF3F));
}

char32_t last_char(std::string_view s) {
  size_t b = s.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  size_t i = b;
  return utf8::next(s, i);
}

// Start of the run of whitespace that ends `s`.
size_t trailing_space_start(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t b = e - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    size_t i = b;
    if (!is_white_space(utf8::next(s, i))) break;
    e = b;
  }
  return e;
}

// Length of the run of whitespace that starts `s`.
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!is_white_space(utf8::next(s, j))) break;
    i = j;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  if (key.empty()) return;
  int32_t node = 0;
  for (unsigned char b : key) {
    int32_t next = child(node, b);
    if (next < 0) {
      next = int32_t(nodes.size());
      nodes.emplace_back();
      auto& ch = nodes[size_t(node)].children;
      ch.insert(std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t(-1))), {b, next});
    }
    node = next;
  }
  // The first token with a given content wins, like the reference's pattern order.
  if (nodes[size_t(node)].token < 0) nodes[size_t(node)].token = token;
  first_byte[static_cast<unsigned char>(key[0])] = true;
}

int32_t AddedVocabulary::Trie::child(int32_t node, unsigned char b) const {
  const auto& ch = nodes[size_t(node)].children;
  if (ch.size() <= 8) {
    for (const auto& [k, v] : ch)
      if (k == b) return v;
    return -1;
  }
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t(-1)));
  return it != ch.end() && it->first == b ? it->second : -1;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    tokens_[i].decoded = tokens_[i].content;
    if (tokens_[i].normalized && normalizer) normalizer->normalize(tokens_[i].decoded);
    by_id_[tokens_[i].id] = i;
    by_content_.emplace(tokens_[i].content, i);
  }
  // Special tokens are matched before ordinary added tokens with the same priority rules.
  std::vector<size_t> order(tokens_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return tokens_[i].special; });
  for (size_t i : order) {
    const AddedToken& t = tokens_[i];
    if (t.normalized) {
      std::string content = t.content;
      if (normalizer) normalizer->normalize(content);
      normalized_trie_.insert(content, int32_t(i));
    } else {
      raw_trie_.insert(t.content, int32_t(i));
    }
  }
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

bool AddedVocabulary::is_special_content(std::string_view content) const {
  const AddedToken* t = find_content(content);
  return t && t->special;
}

void AddedVocabulary::find_matches(std::string_view text, const Trie& trie, bool parse_special,
                                   std::vector<Match>& out) const {
  size_t start_offset = 0;  // end of the previous accepted match
  size_t pos = 0;           // where the non-overlapping search resumes
  const size_t n = text.size();
  while (pos < n) {
    // Leftmost start with any match, then the longest match there.
    size_t start = pos;
    int32_t token = -1;
    size_t end = 0;
    for (; start < n; ++start) {
      if (!trie.first_byte[static_cast<unsigned char>(text[start])]) continue;
      int32_t node = 0;
      for (size_t j = start; j < n; ++j) {
        node = trie.child(node, static_cast<unsigned char>(text[j]));
        if (node < 0) break;
        if (trie.nodes[size_t(node)].token >= 0) {
          token = trie.nodes[size_t(node)].token;
          end = j + 1;
        }
      }
      if (token >= 0) break;
    }
    if (token < 0) break;
    pos = end;
    const AddedToken& t = tokens_[size_t(token)];
    if (!parse_special && t.special) continue;
    if (t.single_word) {
      bool start_ok = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      bool stop_ok = true;
      if (end < n) {
        size_t i = end;
        stop_ok = !is_word_char(utf8::next(text, i));
      }
      if (!start_ok || !stop_ok) continue;
    }
    size_t s = start, e = end;
    if (t.lstrip) s = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (t.rstrip) e += leading_space_len(text.substr(end));
    out.push_back({s, e, token});
    start_offset = e;
    // The search resumes right after the matched text, not after the spaces rstrip took:
    // the reference's matcher does not know about them, so a match may start inside them.
  }
}

void AddedVocabulary::split_with(const PreToken& piece, const Trie& trie, bool parse_special,
                                 std::vector<Segment>& out) const {
  std::vector<Match> matches;
  if (!trie.empty()) find_matches(piece.text, trie, parse_special, matches);
  size_t prev = 0;
  auto text_until = [&](size_t s) {
    if (s > prev) out.push_back(Segment{-1, PreToken{piece.text.substr(prev, s - prev), piece.at_start && prev == 0}});
  };
  for (const Match& m : matches) {
    text_until(m.start);
    out.push_back(Segment{tokens_[size_t(m.token)].id, PreToken{}});
    prev = m.end;
  }
  text_until(piece.text.size());
}

void AddedVocabulary::split(std::string_view text, bool parse_special, const Normalizer* normalizer,
                            std::vector<Segment>& out) const {
  std::vector<Segment> raw;
  split_with(PreToken{std::string(text), true}, raw_trie_, parse_special, raw);
  for (Segment& seg : raw) {
    if (seg.id >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    if (normalizer) normalizer->normalize(seg.text.text);
    if (seg.text.text.empty()) continue;
    if (normalized_trie_.empty()) out.push_back(std::move(seg));
    else split_with(seg.text, normalized_trie_, parse_special, out);
  }
}

}  // namespace spark
