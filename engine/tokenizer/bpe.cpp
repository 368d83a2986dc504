// bpe.cpp — BPE merging (lowest rank first, leftmost on ties, as the reference does),
// merge tables, byte fallback, unknown-token fusing and the sharded word cache.
#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"

namespace spark {

size_t StringHash::operator()(std::string_view s) const noexcept {
  // FNV-1a over 8-byte words: fast for the short strings that tokenizers look up.
  uint64_t h = 0xcbf29ce484222325ULL ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ULL;
    h ^= h >> 29;
  }
  for (; i < s.size(); ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 0x100000001b3ULL;
  return static_cast<size_t>(h ^ (h >> 32));
}

// Open-addressing map from a (left id, right id) pair to (rank, merged id).
struct BpeModel::MergeTable {
  struct Slot {
    uint64_t key = ~0ULL;
    uint32_t rank = 0;
    int32_t id = 0;
  };
  std::vector<Slot> slots;
  uint64_t mask = 0;
  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
  }
  static uint64_t key_of(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  // Later entries overwrite earlier ones, like collecting pairs into a hash map.
  void put(int32_t a, int32_t b, uint32_t rank, int32_t id) {
    uint64_t k = key_of(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k || slots[i].key == ~0ULL) {
        slots[i] = {k, rank, id};
        return;
      }
    }
  }
  const Slot* get(int32_t a, int32_t b) const {
    uint64_t k = key_of(a, b);
    for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == ~0ULL) return nullptr;
    }
  }
};

// Words repeat constantly in real text; caching their ids skips merging. Sharded locks keep
// concurrent encoders (HTTP threads) from serialising on one mutex.
struct BpeModel::Cache {
  static constexpr size_t SHARDS = 64;
  static constexpr size_t MAX_PER_SHARD = 8192;
  static constexpr size_t MAX_WORD = 256;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
  };
  Shard shards[SHARDS];
};

namespace {

std::string byte_token(uint8_t b) {
  static const char* hex = "0123456789ABCDEF";
  std::string s = "<0x";
  s += hex[b >> 4];
  s += hex[b & 15];
  s += '>';
  return s;
}

}  // namespace

void BpeVocab::add_merge(std::string_view left, std::string_view right) {
  merge_spans.push_back(uint32_t(merge_arena.size()));
  merge_spans.push_back(uint32_t(left.size()));
  merge_arena.append(left);
  merge_spans.push_back(uint32_t(merge_arena.size()));
  merge_spans.push_back(uint32_t(right.size()));
  merge_arena.append(right);
}

BpeModel::BpeModel(BpeVocab vocab, BpeOptions opts)
    : vocab_(std::move(vocab.tokens)), opts_(std::move(opts)), cache_(std::make_unique<Cache>()) {
  build_reverse();
  const size_t n = vocab.merge_count();
  merges_ = std::make_unique<MergeTable>(n);
  const size_t prefix_len = opts_.continuing_subword_prefix.size();
  std::string merged;
  for (size_t r = 0; r < n; ++r) {
    std::string_view a = vocab.merge_part(r, 0), b = vocab.merge_part(r, 1);
    int32_t ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia < 0 || ib < 0)
      throw InputError("tokenizer.json: merge #" + std::to_string(r) + " '" + std::string(a) + " " + std::string(b) +
                       "' uses a token that is not in the vocabulary");
    merged.assign(a);
    if (b.size() >= prefix_len) merged.append(b.substr(prefix_len));
    int32_t im = vocab_.find(merged);
    if (im < 0)
      throw InputError("tokenizer.json: merge #" + std::to_string(r) + " '" + std::string(a) + " " + std::string(b) +
                       "' produces '" + merged + "', which is not in the vocabulary");
    merges_->put(ia, ib, static_cast<uint32_t>(r), im);
  }
}

BpeModel::BpeModel(TokenIndex vocab, const std::vector<float>& scores, BpeOptions opts)
    : vocab_(std::move(vocab)), opts_(std::move(opts)), cache_(std::make_unique<Cache>()) {
  build_reverse();
  struct Candidate {
    float score;
    int32_t left, right, merged;
  };
  std::vector<Candidate> cands;
  for (size_t e = 0; e < vocab_.size(); ++e) {
    std::string_view tok = vocab_.key(e);
    int32_t id = vocab_.id(e);
    float score = size_t(id) < scores.size() ? scores[size_t(id)] : 0.f;
    size_t i = 0;
    utf8::next(tok, i);
    for (; i < tok.size(); utf8::next(tok, i)) {
      int32_t l = vocab_.find(tok.substr(0, i)), r = vocab_.find(tok.substr(i));
      if (l >= 0 && r >= 0) cands.push_back({score, l, r, id});
    }
  }
  // Higher score first; ties by the ids of the two halves, as Hugging Face's converter orders them.
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& x, const Candidate& y) {
    if (x.score != y.score) return x.score > y.score;
    if (x.left != y.left) return x.left < y.left;
    return x.right < y.right;
  });
  merges_ = std::make_unique<MergeTable>(cands.size());
  for (size_t r = cands.size(); r-- > 0;) merges_->put(cands[r].left, cands[r].right, uint32_t(r), cands[r].merged);
}

BpeModel::~BpeModel() = default;

void BpeModel::build_reverse() {
  for (size_t e = 0; e < vocab_.size(); ++e) {
    if (vocab_.id(e) < 0) throw InputError("tokenizer: token '" + std::string(vocab_.key(e)) + "' has a negative id");
    max_id_ = std::max(max_id_, vocab_.id(e));
  }
  // Ids index dense tables, so an id far past the number of tokens would cost memory out of
  // all proportion to the file (a few bytes of JSON could ask for gigabytes).
  const size_t id_limit = std::min(size_t(1) << 28, 2 * vocab_.size() + 1024);
  if (size_t(max_id_) >= id_limit)
    throw InputError("tokenizer: token id " + std::to_string(max_id_) + " is implausibly large for a vocabulary of " +
                     std::to_string(vocab_.size()) + " tokens");
  reverse_.assign(size_t(max_id_ + 1), std::string());
  present_.assign(size_t(max_id_ + 1), false);
  for (size_t e = 0; e < vocab_.size(); ++e) {
    size_t id = size_t(vocab_.id(e));
    if (present_[id]) continue;
    reverse_[id] = std::string(vocab_.key(e));
    present_[id] = true;
  }
  if (opts_.unk_token) {
    int32_t id = vocab_.find(*opts_.unk_token);
    if (id >= 0) unk_id_ = id;
  }
  if (opts_.byte_fallback) {
    // With byte fallback, "<0x..>" tokens stand for bytes; a malformed one means a corrupt file.
    for (size_t e = 0; e < vocab_.size(); ++e) {
      std::string_view t = vocab_.key(e);
      if (t.size() == 6 && t.substr(0, 3) == "<0x" && t.back() == '>' &&
          parse_byte_token(std::string(t)) < 0)
        throw InputError("tokenizer: byte-fallback token '" + std::string(t) + "' (id " + std::to_string(vocab_.id(e)) +
                         ") is not of the form <0xNN> with two hex digits");
    }
  }
  for (int b = 0; b < 256; ++b) {
    byte_fallback_ids_[b] = vocab_.find(byte_token(uint8_t(b)));
    raw_byte_ids_[b] = -1;
  }
}

void BpeModel::use_raw_bytes() {
  if (!opts_.continuing_subword_prefix.empty() || !opts_.end_of_word_suffix.empty()) return;
  raw_bytes_ = true;
  raw_vocab_.reserve(vocab_.size());
  for (size_t e = 0; e < vocab_.size(); ++e) {
    auto raw = byte_level::decode(vocab_.key(e));
    if (raw) raw_vocab_.insert(*raw, vocab_.id(e));
  }
  for (int b = 0; b < 256; ++b) raw_byte_ids_[b] = raw_vocab_.find(std::string(1, char(b)));
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  int32_t id = vocab_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id > max_id_ || !present_[size_t(id)]) return nullptr;
  return &reverse_[size_t(id)];
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  // A pending unknown token; consecutive unknowns fuse into one when fuse_unk is set.
  bool unk_pending = false;
  auto unknown = [&]() {
    if (!unk_id_) return;  // no unk token: the character is dropped, as in the reference
    if (unk_pending && !opts_.fuse_unk) ids.push_back(*unk_id_);
    unk_pending = true;
  };
  auto known = [&](int32_t id) {
    if (unk_pending) {
      ids.push_back(*unk_id_);
      unk_pending = false;
    }
    ids.push_back(id);
  };
  auto fallback = [&](std::string_view bytes) {
    if (!opts_.byte_fallback) return false;
    for (unsigned char b : bytes)
      if (byte_fallback_ids_[b] < 0) return false;
    for (unsigned char b : bytes) ids.push_back(byte_fallback_ids_[b]);
    return true;
  };
  if (raw_bytes_) {
    for (size_t i = 0; i < word.size(); ++i) {
      unsigned char b = static_cast<unsigned char>(word[i]);
      if (raw_byte_ids_[b] >= 0) known(raw_byte_ids_[b]);
      else if (!fallback(byte_level::char_of(b))) unknown();
    }
  } else {
    const bool affixes = !opts_.continuing_subword_prefix.empty() || !opts_.end_of_word_suffix.empty();
    std::string piece;
    size_t i = 0;
    while (i < word.size()) {
      size_t s = i;
      i += std::min<size_t>(utf8::seq_len(static_cast<unsigned char>(word[i])), word.size() - i);
      std::string_view ch = word.substr(s, i - s);
      int32_t id;
      if (affixes) {
        piece.clear();
        if (s > 0) piece += opts_.continuing_subword_prefix;
        piece += ch;
        if (i == word.size()) piece += opts_.end_of_word_suffix;
        id = vocab_.find(piece);
      } else {
        id = vocab_.find(ch);
      }
      if (id >= 0) known(id);
      else if (!fallback(ch)) unknown();
    }
  }
  if (unk_pending) ids.push_back(*unk_id_);
}

void BpeModel::merge(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  struct Cand {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Sym> syms(n);
  for (size_t i = 0; i < n; ++i) syms[i] = {ids[i], int32_t(i) - 1, i + 1 < n ? int32_t(i + 1) : -1, true};
  std::vector<Cand> heap_storage;
  heap_storage.reserve(n * 2);
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue(std::greater<Cand>(), std::move(heap_storage));
  for (size_t i = 0; i + 1 < n; ++i)
    if (auto* m = merges_->get(ids[i], ids[i + 1])) queue.push({m->rank, uint32_t(i), m->id});
  while (!queue.empty()) {
    Cand top = queue.top();
    queue.pop();
    Sym& cur = syms[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Sym& right = syms[size_t(cur.next)];
    auto* m = merges_->get(cur.id, right.id);
    if (!m || m->id != top.new_id) continue;  // a stale entry: the pair has changed since
    cur.id = top.new_id;
    right.alive = false;
    cur.next = right.next;
    if (right.next >= 0) syms[size_t(right.next)].prev = int32_t(top.pos);
    if (cur.prev >= 0)
      if (auto* pm = merges_->get(syms[size_t(cur.prev)].id, cur.id)) queue.push({pm->rank, uint32_t(cur.prev), pm->id});
    if (cur.next >= 0)
      if (auto* nm = merges_->get(cur.id, syms[size_t(cur.next)].id)) queue.push({nm->rank, top.pos, nm->id});
  }
  ids.clear();
  for (int32_t i = 0; i >= 0; i = syms[size_t(i)].next) ids.push_back(syms[size_t(i)].id);
}

void BpeModel::tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (opts_.ignore_merges) {
    int32_t id = (raw_bytes_ ? raw_vocab_ : vocab_).find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  initial_symbols(word, ids);
  merge(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() > Cache::MAX_WORD) {
    tokenize_uncached(word, out);
    return;
  }
  size_t h = StringHash{}(word);
  Cache::Shard& shard = cache_->shards[(h >> 7) % Cache::SHARDS];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(word);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t before = out.size();
  tokenize_uncached(word, out);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= Cache::MAX_PER_SHARD) shard.map.clear();
  shard.map.emplace(std::string(word), std::vector<int32_t>(out.begin() + long(before), out.end()));
}

}  // namespace spark
