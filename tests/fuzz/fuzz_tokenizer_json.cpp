// fuzz_tokenizer_json.cpp — libFuzzer target: any bytes as tokenizer.json. A file that loads is
// then used to encode and decode; bad files must end in InputError, and nothing may crash,
// hang or read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;
  std::string text(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<spark::Tokenizer> tok;
  try {
    tok = spark::Tokenizer::from_json_text(text, "");
  } catch (const spark::InputError&) {
    return 0;
  }
  static const char* const inputs[] = {"", "Hello, world! 123", " \n\t  x", "<s>[INST] hi</s>", "\xE4\xB8\xAD\xF0\x9F\x98",
                                       "\xFF\xFE broken", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!"};
  std::vector<int32_t> all;
  for (const char* in : inputs) {
    try {
      for (bool special : {false, true}) {
        auto ids = tok->encode(in, special, special);
        for (int32_t id : ids) SPARK_CHECK(id >= 0 && id < tok->vocab_size());
        all.insert(all.end(), ids.begin(), ids.end());
      }
    } catch (const spark::InputError&) {
      // A pathological pre-tokenizer regex may hit its match limit: a clean error is fine.
    }
  }
  // Decode the ids, and ids derived from the input bytes (including out-of-range ones).
  for (size_t i = 0; i + 1 < size && i < 64; i += 2) all.push_back(int32_t(data[i]) << 8 | data[i + 1]);
  for (bool skip : {false, true}) {
    std::string whole = tok->decode(all, skip);
    spark::IncrementalDetokenizer detok(*tok, skip);
    std::string streamed;
    for (int32_t id : all) streamed += detok.push(id);
    streamed += detok.flush();
    SPARK_CHECK(streamed == whole, "streamed decode differs from decode");
  }
  return 0;
}
