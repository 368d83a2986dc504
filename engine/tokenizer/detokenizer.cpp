// detokenizer.cpp — incremental decoding over a short window of tokens.
//
// Decoders are local: a token's text depends on itself and, at most, on its neighbours
// (the first token's stripped space, byte-fallback groups, incomplete UTF-8). So each step
// decodes only the tokens since the last fully emitted one plus that one as context, which
// keeps the work per token constant instead of re-decoding the whole sequence.
#include "engine/tokenizer/detokenizer.h"

#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/tokenizer.h"

namespace spark {

namespace {

constexpr std::string_view REPLACEMENT = "\xEF\xBF\xBD";

// Length of `s` without its trailing run of U+FFFD: those may still become a character
// when more bytes arrive, everything before them is final.
size_t stable_length(const std::string& s) {
  size_t n = s.size();
  while (n >= 3 && s.compare(n - 3, 3, REPLACEMENT) == 0) n -= 3;
  return n;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tok_(tokenizer), skip_special_(skip_special_tokens), byte_fallback_(tokenizer.has_byte_fallback_decoder()) {}

std::string IncrementalDetokenizer::advance(bool final) {
  std::string text = tok_.decode(window_, skip_special_);
  size_t stable = final ? text.size() : stable_length(text);
  // A byte-fallback group is decoded as a whole: a valid prefix can turn into U+FFFD when
  // an invalid byte follows, so nothing is emitted while the window ends in a byte token.
  if (!final && byte_fallback_ && !window_.empty() && parse_byte_token(tok_.token_text(window_.back())) >= 0)
    stable = std::min(stable, emitted_);
  std::string delta;
  if (stable > emitted_) delta = text.substr(emitted_, stable - emitted_);
  if (stable > emitted_) emitted_ = stable;
  if (!final && stable == text.size() && window_.size() > 1) {
    // Everything is out: keep only the last token as context for the next step.
    window_.erase(window_.begin(), window_.end() - 1);
    emitted_ = tok_.decode(window_, skip_special_).size();
  }
  return delta;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (tok_.decodes_to_nothing(id, skip_special_)) return "";
  window_.push_back(id);
  return advance(false);
}

std::string IncrementalDetokenizer::flush() {
  std::string rest = advance(true);
  window_.clear();
  emitted_ = 0;
  return rest;
}

}  // namespace spark
