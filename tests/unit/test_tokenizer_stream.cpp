// test_tokenizer_stream.cpp — the incremental detokenizer: its deltas must concatenate to
// Tokenizer::decode of all ids and never hold a half-written character, on real tokenizers
// (fixtures) and on byte-fallback sequences built to split characters across tokens.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

using spark::IncrementalDetokenizer;
using spark::Tokenizer;

namespace {

std::string fixtures_dir() {
  if (const char* env = std::getenv("SPARKD_FIXTURES")) return env;
  return "../shared/fixtures";
}

const Tokenizer& fixture(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    std::string dir = fixtures_dir() + "/tokenizers/" + name;
    REQUIRE_MESSAGE(std::filesystem::exists(dir + "/tokenizer.json"), "fixture tokenizer missing: " << dir);
    slot = Tokenizer::load(dir);
  }
  return *slot;
}

// Streams `ids` and checks every delta and their concatenation.
void check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    std::string delta = detok.push(id);
    CHECK(spark::utf8::is_valid(delta));
    all += delta;
  }
  all += detok.flush();
  CHECK(all == tok.decode(ids, skip));
}

const char* const TEXTS[] = {
    "Hello, world! How are you today?",
    "我爱自然语言处理。今天天气很好！",
    "emoji 👨‍👩‍👧‍👦 and skin tones 👍🏽 flags 🇯🇵",
    "नमस्ते दुनिया, مرحبا بالعالم",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\n\nok",
    "  leading spaces\n\n\ttabs and\r\nnewlines   ",
    "def f(x):\n    return x ** 2  # ok",
};

}  // namespace

TEST_CASE("detokenizer: deltas concatenate to decode() on real tokenizers") {
  for (const char* name : {"qwen3", "llama3_1"}) {
    const Tokenizer& tok = fixture(name);
    for (const char* text : TEXTS)
      for (bool skip : {false, true}) check_stream(tok, tok.encode(text), skip);
    // Random ids split multi-byte characters across tokens in every way the vocabulary allows.
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> any(0, tok.vocab_size() + 5);
    for (int round = 0; round < 200; ++round) {
      std::vector<int32_t> ids(size_t(1 + rng() % 30));
      for (auto& id : ids) id = any(rng);
      check_stream(tok, ids, round % 2 == 0);
    }
  }
}

TEST_CASE("detokenizer: byte-level tokens that split a character are held back until complete") {
  const Tokenizer& tok = fixture("qwen3");
  // "中" is E4 B8 AD; byte-level tokens for single bytes exist in every byte-level vocabulary.
  std::vector<int32_t> ids;
  for (const char* t : {"ä", "¸", "Ń"}) ids.push_back(tok.token_id(t).value());
  IncrementalDetokenizer detok(tok, false);
  CHECK(detok.push(ids[0]).empty());
  CHECK(detok.push(ids[1]).empty());
  CHECK(detok.push(ids[2]) == "中");
  CHECK(detok.flush().empty());
  // An incomplete tail comes out on flush, as decode() renders it.
  IncrementalDetokenizer cut(tok, false);
  CHECK(cut.push(ids[0]).empty());
  CHECK(cut.flush() == "\xEF\xBF\xBD");
}

TEST_CASE("detokenizer: byte-fallback groups (SentencePiece) stay exact") {
  spark::GgufVocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>", "▁", "a", "▁a"};
  v.scores = {0, 0, 0, -1, -2, -0.5f};
  v.token_types = {2, 3, 3, 1, 1, 1};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    v.tokens.push_back(buf);
    v.scores.push_back(0);
    v.token_types.push_back(6);
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.add_space_prefix = true;
  auto tok = Tokenizer::from_gguf_vocab(v);
  auto byte = [](int b) { return int32_t(6 + b); };
  // A valid prefix followed by an invalid byte turns the whole group into U+FFFD.
  check_stream(*tok, {5, byte(0x61), byte(0xE4), byte(0xB8), byte(0xAD), 5}, false);
  check_stream(*tok, {5, byte(0xE4), byte(0xB8), byte(0xAD), byte(0x80), 5}, false);
  check_stream(*tok, {1, byte(0xF0), byte(0x9F), byte(0x98), byte(0x80)}, true);
  std::mt19937 rng(99);
  for (int round = 0; round < 500; ++round) {
    std::vector<int32_t> ids(size_t(1 + rng() % 20));
    for (auto& id : ids) id = rng() % 4 == 0 ? int32_t(rng() % 6) : byte(0x80 + int(rng() % 0x60) - (rng() % 3 == 0 ? 0x40 : 0));
    check_stream(*tok, ids, round % 2 == 0);
  }
}
