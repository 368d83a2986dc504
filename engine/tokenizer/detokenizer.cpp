// detokenizer.cpp — incremental decoding: a short window of tokens for decoders that allow
// it, the whole sequence with a stable-prefix analysis for the rest.
//
// The window. For the common chains (ByteLevel; Replace + ByteFallback + Fuse [+ Strip of
// one leading space]; Metaspace; WordPiece; CTC; none) a token's text depends on itself
// and, at most, on the token before it. So once everything is emitted, the last token is
// kept as context and the rest dropped: decode([context, new...]) is decode([context])
// followed by the new tokens' text in the whole sequence. That holds when
//   - every decoder acts on each token alone, or joins them (ByteLevel, Fuse) and only then
//     strips at most one leading character;
//   - the context's text was emitted in full (no held U+FFFD that more bytes may complete);
//   - the context is not a <0xNN> byte token (a byte run may still grow, and an invalid run
//     turns into U+FFFDs as a whole);
//   - some text is already out and the context decodes alone to non-empty text: then a
//     leading Strip on the joined text has settled its cut, in the whole sequence as in
//     the window, and leaves the new tokens alone in both.
// Decoder::check_window decides the first condition; advance_window enforces the others.
// The work per token is then constant.
//
// Everything else (BPEDecoder suffixes, a Strip of trailing or several leading characters
// on joined text, Replace or Metaspace after a join, ...) can change text that an earlier
// decode already showed. For those each step decodes the whole sequence and emits only the
// prefix that Decoder::decode_open proves no later token can change: linear work per token.
#include "engine/tokenizer/detokenizer.h"

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

// `n` moved back to the start of a UTF-8 sequence of `s`.
size_t char_boundary(const std::string& s, size_t n) {
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tok_(tokenizer), skip_special_(skip_special_tokens), windowed_(tokenizer.decodes_in_window()) {}

std::string IncrementalDetokenizer::advance_window(bool final) {
  std::string text = tok_.decode(window_, skip_special_);
  size_t stable = final ? text.size() : stable_length(text);
  bool ends_in_byte = !window_.empty() && tok_.is_fallback_byte(window_.back());
  if (!final && ends_in_byte) stable = std::min(stable, emitted_);
  std::string delta;
  if (stable > emitted_) {
    delta = text.substr(emitted_, stable - emitted_);
    emitted_ = stable;
    started_ = true;
  }
  if (!final && started_ && !ends_in_byte && stable == text.size() && window_.size() > 1) {
    // Everything is out: keep only the last token as context for the next step.
    context_.assign(1, window_.back());
    std::string context = tok_.decode(context_, skip_special_);
    if (!context.empty()) {
      window_.erase(window_.begin(), window_.end() - 1);
      emitted_ = context.size();
    }
  }
  return delta;
}

std::string IncrementalDetokenizer::advance_open(bool final) {
  size_t stable = 0;
  std::string text = tok_.decode_open(window_, skip_special_, stable);
  if (final) stable = text.size();
  stable = char_boundary(text, std::min(stable, text.size()));
  if (stable <= emitted_) return "";
  std::string delta = text.substr(emitted_, stable - emitted_);
  emitted_ = stable;
  return delta;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (tok_.decodes_to_nothing(id, skip_special_)) return "";
  window_.push_back(id);
  return windowed_ ? advance_window(false) : advance_open(false);
}

std::string IncrementalDetokenizer::flush() {
  std::string rest = windowed_ ? advance_window(true) : advance_open(true);
  window_.clear();
  emitted_ = 0;
  started_ = false;
  return rest;
}

}  // namespace spark
