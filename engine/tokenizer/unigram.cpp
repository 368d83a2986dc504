// unigram.cpp — Unigram segmentation, written to give Hugging Face's results bit for bit:
// scores add up in double precision in the same order, ties keep the first candidate (shorter
// pieces are tried first), and a character no piece covers costs (lowest score - 10).
#include "engine/tokenizer/unigram.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"

namespace spark {

namespace {

// What an uncovered character costs below the least likely piece (SentencePiece's kUnkPenalty).
constexpr double UNK_PENALTY = 10.0;

}  // namespace

UnigramModel::UnigramModel(std::vector<std::string> pieces, std::vector<double> scores, std::optional<int32_t> unk_id,
                           bool byte_fallback)
    : pieces_(std::move(pieces)), scores_(std::move(scores)), unk_id_(unk_id), byte_fallback_(byte_fallback) {
  if (pieces_.empty()) throw InputError("Unigram model: the vocabulary is empty");
  if (pieces_.size() != scores_.size())
    throw InputError("Unigram model: " + std::to_string(pieces_.size()) + " pieces but " +
                     std::to_string(scores_.size()) + " scores");
  if (pieces_.size() > size_t(INT32_MAX)) throw InputError("Unigram model: the vocabulary is too large");
  if (unk_id_ && (*unk_id_ < 0 || size_t(*unk_id_) >= pieces_.size()))
    throw InputError("Unigram model: unk_id " + std::to_string(*unk_id_) + " is outside the vocabulary (" +
                     std::to_string(pieces_.size()) + " pieces)");
  double min_score = INFINITY;
  for (size_t i = 0; i < scores_.size(); ++i) {
    if (!std::isfinite(scores_[i]))
      throw InputError("Unigram model: piece " + std::to_string(i) + " has a score that is not a finite number");
    min_score = std::min(min_score, scores_[i]);
  }
  unk_score_ = min_score - UNK_PENALTY;
  build_trie();
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[b] = piece_id(name);
  }
}

UnigramModel::~UnigramModel() = default;

void UnigramModel::build_trie() {
  // Pieces sorted by (bytes, id): the pieces under one node form a contiguous range, and of
  // equal spellings the highest id comes last and wins, as in Hugging Face's token -> id map.
  std::vector<std::pair<std::string_view, int32_t>> sorted;
  sorted.reserve(pieces_.size());
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (!pieces_[i].empty()) sorted.emplace_back(pieces_[i], int32_t(i));  // "" never matches text
  std::sort(sorted.begin(), sorted.end());
  auto add_node = [&](uint8_t label) {
    trie_.first_child.push_back(0);
    trie_.child_count.push_back(0);
    trie_.label.push_back(label);
    trie_.id.push_back(-1);
    return int32_t(trie_.id.size() - 1);
  };
  struct Range {
    int32_t node;
    size_t lo, hi, depth;
  };
  std::vector<Range> pending{{add_node(0), 0, sorted.size(), 0}};
  while (!pending.empty()) {
    Range r = pending.back();
    pending.pop_back();
    size_t k = r.lo;
    for (; k < r.hi && sorted[k].first.size() == r.depth; ++k) trie_.id[size_t(r.node)] = sorted[k].second;
    // All children of a node are made here, one after another, so they sit side by side.
    trie_.first_child[size_t(r.node)] = uint32_t(trie_.id.size());
    uint16_t count = 0;
    while (k < r.hi) {
      const uint8_t b = uint8_t(sorted[k].first[r.depth]);
      size_t e = k;
      while (e < r.hi && uint8_t(sorted[e].first[r.depth]) == b) ++e;
      pending.push_back({add_node(b), k, e, r.depth + 1});
      ++count;
      k = e;
    }
    trie_.child_count[size_t(r.node)] = count;
  }
}

int32_t UnigramModel::Trie::child(int32_t node, uint8_t byte) const {
  const auto begin = label.begin() + first_child[size_t(node)];
  const auto end = begin + child_count[size_t(node)];
  const auto it = std::lower_bound(begin, end, byte);
  return it != end && *it == byte ? int32_t(it - label.begin()) : -1;
}

int32_t UnigramModel::piece_id(std::string_view s) const {
  if (s.empty()) return -1;
  int32_t node = 0;
  for (unsigned char c : s)
    if ((node = trie_.child(node, c)) < 0) return -1;
  return trie_.id[size_t(node)];
}

std::vector<std::pair<size_t, int32_t>> UnigramModel::best_path(std::string_view word) const {
  struct Best {
    double score = 0;
    int64_t start = -1;  // -1: no path ends here yet
    int32_t id = -1;
  };
  const size_t n = word.size();
  std::vector<Best> best(n + 1);
  auto offer = [&](size_t end, size_t start, int32_t id, double score) {
    Best& b = best[end];
    if (b.start < 0 || score > b.score) b = {score, int64_t(start), id};
  };
  for (size_t start = 0; start < n;) {
    const double base = best[start].score;
    const size_t char_len = std::min<size_t>(utf8::seq_len(uint8_t(word[start])), n - start);
    bool covered = false;  // a piece spans exactly this one character
    int32_t node = 0;
    for (size_t p = start; p < n; ++p) {
      if ((node = trie_.child(node, uint8_t(word[p]))) < 0) break;
      const int32_t id = trie_.id[size_t(node)];
      if (id < 0) continue;
      offer(p + 1, start, id, scores_[size_t(id)] + base);
      if (p + 1 - start == char_len) covered = true;
    }
    if (!covered) {
      if (!unk_id_) throw InputError("Unigram model: no piece covers a character of the input and the model has no unk_id");
      offer(start + char_len, start, *unk_id_, unk_score_ + base);
    }
    start += char_len;
  }
  std::vector<std::pair<size_t, int32_t>> path;
  for (size_t end = n; end > 0; end = size_t(best[end].start)) path.emplace_back(end, best[end].id);
  std::reverse(path.begin(), path.end());
  return path;
}

void UnigramModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  const auto path = best_path(word);
  size_t start = 0;
  for (size_t i = 0; i < path.size();) {
    if (!unk_id_ || path[i].second != *unk_id_) {
      out.push_back(path[i].second);
      start = path[i].first;
      ++i;
      continue;
    }
    // A run of unknown pieces is one token, named by its text: its id is the text's piece if
    // there is one, else its bytes' <0xNN> pieces (byte_fallback, all or none), else unk.
    size_t end = start;
    while (i < path.size() && path[i].second == *unk_id_) end = path[i++].first;
    const std::string_view text = word.substr(start, end - start);
    start = end;
    if (int32_t id = piece_id(text); id >= 0) {
      out.push_back(id);
      continue;
    }
    bool all_bytes = byte_fallback_;
    for (size_t k = 0; all_bytes && k < text.size(); ++k) all_bytes = byte_ids_[uint8_t(text[k])] >= 0;
    if (all_bytes) {
      for (unsigned char c : text) out.push_back(byte_ids_[c]);
      continue;
    }
    out.push_back(*unk_id_);
  }
}

std::optional<int32_t> UnigramModel::token_to_id(std::string_view token) const {
  int32_t id = piece_id(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* UnigramModel::id_to_token(int32_t id) const {
  if (id < 0 || size_t(id) >= pieces_.size()) return nullptr;
  return &pieces_[size_t(id)];
}

}  // namespace spark
