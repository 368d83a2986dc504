// token_table.cpp — token bytes from a tokenizer, the byte tries and string-body masks.
#include "engine/constrain/token_table.h"

#include <algorithm>
#include <numeric>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace spark::constrain {

TokenTrie TokenTrie::build(const std::vector<std::string>& token_bytes, const std::vector<int32_t>& ids) {
  std::vector<int32_t> order = ids;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[a] != token_bytes[b] ? token_bytes[a] < token_bytes[b] : a < b;
  });
  TokenTrie t;
  t.nodes.push_back({});
  std::vector<uint32_t> path{0};  // path[d] = the node at depth d on the current branch
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = token_bytes[id];
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    while (path.size() > common + 1) {
      t.nodes[path.back()].subtree_end = uint32_t(t.nodes.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(uint32_t(t.nodes.size()));
      t.nodes.push_back({0, -1, uint8_t(s[d])});
    }
    TokenTrie::Node& end = t.nodes[path.back()];
    if (end.token < 0) end.token = id;
    else t.same_bytes.emplace_back(path.back(), id);
    prev = &s;
  }
  while (!path.empty()) {
    t.nodes[path.back()].subtree_end = uint32_t(t.nodes.size());
    path.pop_back();
  }
  std::sort(t.same_bytes.begin(), t.same_bytes.end());
  return t;
}

TokenTable::TokenTable(std::vector<std::string> token_bytes, Encoder encode,
                       std::unordered_map<int32_t, std::string> markup)
    : bytes_(std::move(token_bytes)), encode_(std::move(encode)), markup_(std::move(markup)) {
  std::vector<int32_t> ids, quoted;
  for (int32_t id = 0; id < int32_t(bytes_.size()); ++id) {
    const std::string& s = bytes_[id];
    if (s.empty()) continue;
    ids.push_back(id);
    max_token_bytes_ = std::max(max_token_bytes_, s.size());
    if (s.find_first_of("\"\\") != std::string::npos) quoted.push_back(id);
  }
  all_ = TokenTrie::build(bytes_, ids);
  quoted_ = TokenTrie::build(bytes_, quoted);
  const size_t words = (bytes_.size() + 63) / 64;
  // Below this many tokens, setting or clearing bits one by one beats copying a whole mask.
  constexpr size_t kFewTokens = 1024;
  for (uint8_t state = 0; state < kStringStates; ++state) {
    auto& mask = body_masks_[state];
    mask.assign(words, 0);
    std::vector<std::pair<uint32_t, int32_t>> counted;  // (characters started, token)
    for (int32_t id : ids) {
      uint8_t st = state;
      uint32_t chars = 0;
      for (char c : bytes_[id]) {
        if (c == '"' || c == '\\') {
          st = kStringDead;
          break;
        }
        chars += st == kStringBoundary;
        st = string_body_step(st, uint8_t(c));
        if (st == kStringDead) break;
      }
      if (st == kStringDead) continue;
      mask[size_t(id) / 64] |= uint64_t(1) << (id % 64);
      counted.emplace_back(chars, id);
    }
    std::sort(counted.begin(), counted.end());
    BodyByLength& by = by_length_[state];
    const uint32_t most = counted.empty() ? 0 : counted.back().first;
    by.upto.assign(most + 1, 0);
    for (const auto& [chars, id] : counted) {
      by.tokens.push_back(id);
      ++by.upto[chars];
    }
    for (uint32_t k = 1; k <= most; ++k) by.upto[k] += by.upto[k - 1];
    by.masks.resize(most + 1);
    for (uint32_t k = 0; k < most; ++k) {
      if (std::min<size_t>(by.upto[k], by.tokens.size() - by.upto[k]) <= kFewTokens) continue;
      by.masks[k].assign(words, 0);
      for (uint32_t i = 0; i < by.upto[k]; ++i) by.masks[k][size_t(by.tokens[i]) / 64] |= uint64_t(1) << (by.tokens[i] % 64);
    }
  }
}

void TokenTable::body_mask_within(uint8_t state, uint32_t room, std::vector<uint64_t>& mask) const {
  const BodyByLength& by = by_length_[state];
  const std::vector<uint64_t>& all = body_masks_[state];
  if (room >= by.upto.size() - 1) {
    std::copy(all.begin(), all.end(), mask.begin());
    return;
  }
  if (!by.masks[room].empty()) {
    std::copy(by.masks[room].begin(), by.masks[room].end(), mask.begin());
    return;
  }
  const size_t fit = by.upto[room];
  if (fit <= by.tokens.size() - fit) {
    std::fill(mask.begin(), mask.begin() + long(all.size()), 0);
    for (size_t i = 0; i < fit; ++i) mask[size_t(by.tokens[i]) / 64] |= uint64_t(1) << (by.tokens[i] % 64);
  } else {
    std::copy(all.begin(), all.end(), mask.begin());
    for (size_t i = fit; i < by.tokens.size(); ++i) mask[size_t(by.tokens[i]) / 64] &= ~(uint64_t(1) << (by.tokens[i] % 64));
  }
}

// Raw bytes per token. Byte-level vocabularies (GPT-2 style) map characters back to bytes,
// so tokens holding part of a UTF-8 character keep their exact bytes; <0xNN> tokens are
// their byte; other vocabularies (SentencePiece) are decoded after a reference token, so
// a leading-space marker is not stripped as it would be at the start of a text.
std::shared_ptr<const TokenTable> TokenTable::from_tokenizer(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  auto space = tok.token_id(byte_level::char_of(' '));
  const bool byte_level = space && tok.decode({*space}) == " ";
  auto ref = tok.token_id("a");
  const std::string ref_text = ref ? tok.decode({*ref}) : "";
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::unordered_map<int32_t, std::string> markup;
  for (int32_t id = 0; id < n; ++id) {
    // Added tokens (special or not: <tool_call>, <think>, ...) are markup, never inside a
    // constrained value; llguidance excludes them the same way.
    if (tok.is_added(id)) {
      markup[id] = tok.token_text(id);
      continue;
    }
    const std::string& text = tok.token_text(id);
    if (text.empty()) continue;
    if (tok.is_fallback_byte(id)) {
      int b = parse_byte_token(text);
      if (b >= 0) bytes[id] = std::string(1, char(b));
      continue;
    }
    if (byte_level) {
      auto raw = byte_level::decode(text);
      bytes[id] = raw ? *raw : tok.decode({id});
    } else if (ref) {
      std::string both = tok.decode({*ref, id});
      bytes[id] = both.compare(0, ref_text.size(), ref_text) == 0 ? both.substr(ref_text.size()) : tok.decode({id});
    } else {
      bytes[id] = tok.decode({id});
    }
  }
  auto encode = [&tok](const std::string& text) { return tok.encode(text, /*add_special_tokens=*/false, /*parse_special=*/false); };
  return std::make_shared<const TokenTable>(std::move(bytes), encode, std::move(markup));
}

const std::string& TokenTable::text(int32_t id) const {
  static const std::string kNone;
  if (id < 0 || size_t(id) >= bytes_.size()) return kNone;  // a model's padding past the tokenizer
  auto it = markup_.find(id);
  return it != markup_.end() ? it->second : bytes_[size_t(id)];
}

}  // namespace spark::constrain
