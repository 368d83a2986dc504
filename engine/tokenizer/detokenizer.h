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
  // Text newly final after `id`; "" while what it adds may still change.
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete sequence is emitted as the decoder renders it).
  std::string flush();

 private:
  // Decodes the window, returns the part not yet emitted, holding back an unstable tail.
  std::string advance_window(bool final);
  // Decodes every id, returns the part not yet emitted up to what later ids cannot change.
  std::string advance_open(bool final);

  const Tokenizer& tok_;
  bool skip_special_;
  bool windowed_;
  // Visible ids. Windowed: those since the context token; window_[0] is the context (already
  // emitted) once the first cut was made. Otherwise: all of them. emitted_ is how many bytes
  // of decode(window_) are out.
  std::vector<int32_t> window_;
  std::vector<int32_t> context_;  // scratch: the window's last id alone
  size_t emitted_ = 0;
  bool started_ = false;  // some text is out
};

}  // namespace spark
