// detokenizer.h — streaming detokenization: text deltas per generated token that never split
// a UTF-8 sequence and concatenate to Tokenizer::decode of all ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spark {

class Tokenizer;

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);
  // Text newly complete after `id`; "" while a character is still incomplete.
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete sequence is emitted as the decoder renders it).
  std::string flush();

 private:
  // Decodes the window and returns the part not yet emitted, holding back an unstable tail.
  std::string advance(bool final);

  const Tokenizer& tok_;
  bool skip_special_;
  bool byte_fallback_;
  // Visible ids since the context token; window_[0] is the context (already emitted) once
  // the first token has been emitted. emitted_ is how many bytes of decode(window_) are out.
  std::vector<int32_t> window_;
  size_t emitted_ = 0;
};

}  // namespace spark
