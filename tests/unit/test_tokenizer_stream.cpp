// test_tokenizer_stream.cpp — the incremental detokenizer: its deltas must concatenate to
// Tokenizer::decode of all ids and never hold a half-written character, on real tokenizers
// (fixtures), on byte-fallback sequences built to split characters across tokens, and on
// decoder chains whose text for a token depends on the tokens after it (CTC, WordPiece
// cleanup, Strip, BPEDecoder, Replace on joined text).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "engine/tokenizer/detokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "tests/unit/fixture_files.h"

using spark::IncrementalDetokenizer;
using spark::Tokenizer;
using json = nlohmann::json;

namespace {

const Tokenizer& fixture(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    std::string dir = spark::testing::fixtures_dir() + "/tokenizers/" + name;
    REQUIRE_MESSAGE(std::filesystem::exists(dir + "/tokenizer.json"),
                    "fixture tokenizer missing: " << dir << " " << spark::testing::fixtures_hint());
    slot = Tokenizer::load(dir);
  }
  return *slot;
}

// Streams `ids` and checks every delta and their concatenation; returns the concatenation.
std::string check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    std::string delta = detok.push(id);
    CHECK(spark::utf8::is_valid(delta));
    all += delta;
  }
  all += detok.flush();
  CHECK(all == tok.decode(ids, skip));
  return all;
}

// A BPE tokenizer.json with no merges whose vocabulary is `vocab` (id = position), plus a
// special "<s>", and whose decoder is the JSON text `decoder`.
std::unique_ptr<Tokenizer> with_decoder(const std::vector<std::string>& vocab, const std::string& decoder) {
  json v = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  json added = json::array({{{"id", vocab.size()}, {"content", "<s>"}, {"special", true}}});
  json j = {{"added_tokens", added},
            {"model", {{"type", "BPE"}, {"vocab", v}, {"merges", json::array()}}},
            {"decoder", json::parse(decoder)}};
  return Tokenizer::from_json_text(j.dump(), "");
}

std::vector<int32_t> ids_of(const Tokenizer& tok, const std::vector<std::string>& tokens) {
  std::vector<int32_t> ids;
  for (const auto& t : tokens) ids.push_back(tok.token_id(t).value());
  return ids;
}

const std::vector<std::string> SMALL_VOCAB = {"a",      "b",   "\u2581", "\u2581a", "\u2581b", " ",     ".",
                                              "x",      " do", " no",    "t",       "<pad>",   "|",     "##b",
                                              "a</w>b", "c",   "<0x41>", "<0xE4>",  "<0xB8>",  "<0xAD>"};

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
  for (const char* name : {"qwen3", "llama3_1", "xlmr"}) {
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
  CHECK(tok->decodes_in_window());  // Replace, ByteFallback, Fuse, Strip of one leading space
  auto byte = [](int b) { return int32_t(6 + b); };
  // A valid prefix followed by an invalid byte turns the whole group into U+FFFD.
  check_stream(*tok, {5, byte(0x61), byte(0xE4), byte(0xB8), byte(0xAD), 5}, false);
  check_stream(*tok, {5, byte(0xE4), byte(0xB8), byte(0xAD), byte(0x80), 5}, false);
  check_stream(*tok, {1, byte(0xF0), byte(0x9F), byte(0x98), byte(0x80)}, true);
  std::mt19937 rng(99);
  for (int round = 0; round < 500; ++round) {
    std::vector<int32_t> ids(size_t(1 + rng() % 20));
    for (auto& id : ids)
      id = rng() % 4 == 0 ? int32_t(rng() % 6) : byte(0x80 + int(rng() % 0x60) - (rng() % 3 == 0 ? 0x40 : 0));
    check_stream(*tok, ids, round % 2 == 0);
  }
}

// Decoders that join the tokens and then strip, clean up or replace see text across token
// boundaries; a window of [context, new tokens] then decodes differently from the whole
// sequence. These streamed wrong before the detokenizer fell back to whole-sequence decoding
// (the first is the fuzz finding tests/fuzz/seeds/fuzz_tokenizer_json/strip_two_leading.json).
TEST_CASE("detokenizer: Strip of two leading spaces on the joined text (fuzz finding)") {
  auto tok = with_decoder(SMALL_VOCAB, R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 2, "stop": 0}]})");
  CHECK_FALSE(tok->decodes_in_window());
  CHECK(check_stream(*tok, ids_of(*tok, {"a", "▁", "▁a"}), false) == "a  a");
  CHECK(check_stream(*tok, ids_of(*tok, {"▁", "▁", "▁a", "▁"}), false) == " a ");
}

TEST_CASE("detokenizer: Strip of trailing spaces on the joined text holds them back") {
  auto tok = with_decoder(SMALL_VOCAB, R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 1}]})");
  CHECK(check_stream(*tok, ids_of(*tok, {"a", "▁", "b"}), false) == "a b");
  IncrementalDetokenizer detok(*tok, false);
  CHECK(detok.push(tok->token_id("a").value()) == "a");
  CHECK(detok.push(tok->token_id("▁").value()).empty());  // the space may be the end
  CHECK(detok.flush().empty());
}

TEST_CASE("detokenizer: CTC decoder (dropped pads, cleanup across joined tokens)") {
  // Alone, CTC is token-local: the window path stays exact.
  auto plain = with_decoder(SMALL_VOCAB,
                            R"({"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": true})");
  CHECK(plain->decodes_in_window());
  CHECK(check_stream(*plain, ids_of(*plain, {"a", "a", "<pad>", "a", "|", "b", "b", "."}), false) == "aa b.");
  // A dropped pad must not make the next token the first one for Metaspace.
  auto then_metaspace = with_decoder(SMALL_VOCAB, R"({"type": "Sequence", "decoders": [
      {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": true},
      {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}]})");
  CHECK(check_stream(*then_metaspace, ids_of(*then_metaspace, {"a", "<pad>", "▁b"}), false) == "a b");
  // After Fuse, " ." across two tokens is cleaned up to ".".
  auto fused = with_decoder(SMALL_VOCAB, R"({"type": "Sequence", "decoders": [{"type": "Fuse"},
      {"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": true}]})");
  CHECK(check_stream(*fused, ids_of(*fused, {"a", " ", "."}), false) == "a.");
  CHECK(check_stream(*fused, ids_of(*fused, {"a", "<pad>", "|", "b"}), false) == "a b");
}

TEST_CASE("detokenizer: WordPiece decoder with cleanup") {
  auto plain = with_decoder(SMALL_VOCAB, R"({"type": "WordPiece", "prefix": "##", "cleanup": true})");
  CHECK(plain->decodes_in_window());
  CHECK(check_stream(*plain, ids_of(*plain, {"a", "##b", ".", "x", "##b"}), false) == "ab. xb");
  // On joined text " do not" becomes " don't", across three tokens.
  auto fused = with_decoder(SMALL_VOCAB, R"({"type": "Sequence", "decoders": [{"type": "Fuse"},
      {"type": "WordPiece", "prefix": "##", "cleanup": true}]})");
  CHECK_FALSE(fused->decodes_in_window());
  CHECK(check_stream(*fused, ids_of(*fused, {"x", " do", " no", "t"}), false) == "x don't");
  CHECK(check_stream(*fused, ids_of(*fused, {"x", " ", ".", " do", " no", "x"}), false) == "x. do nox");
}

TEST_CASE("detokenizer: BPEDecoder suffix inside a token, and Replace on joined text") {
  auto bpe = with_decoder(SMALL_VOCAB, R"({"type": "BPEDecoder", "suffix": "</w>"})");
  CHECK(check_stream(*bpe, ids_of(*bpe, {"a</w>b", "c"}), false) == "a bc");
  IncrementalDetokenizer detok(*bpe, false);
  CHECK(detok.push(bpe->token_id("a</w>b").value()) == "a");  // streams what it can
  CHECK(detok.push(bpe->token_id("c").value()) == " bc");
  CHECK(detok.flush().empty());
  auto replace = with_decoder(SMALL_VOCAB, R"({"type": "Sequence", "decoders": [{"type": "Fuse"},
      {"type": "Replace", "pattern": {"String": "ab"}, "content": "X"}]})");
  CHECK(check_stream(*replace, ids_of(*replace, {"a", "b", "a", "a", "b"}), false) == "XaX");
}

TEST_CASE("detokenizer: the window path stays on for the common tokenizers") {
  for (const char* name : {"qwen3", "llama3_1", "gptoss", "gemma3", "xlmr"})
    CHECK_MESSAGE(fixture(name).decodes_in_window(), name);
}

// Random decoder chains over a vocabulary of tokens that trip decoders up (spaces, "▁",
// pads, prefixes, suffixes, byte tokens, byte-level characters, multi-byte characters).
TEST_CASE("detokenizer: any decoder chain streams exactly what decode() returns") {
  const std::vector<std::string> vocab = {
      "a",      "b",      "ab",     "\u2581", "\u2581\u2581", "\u2581a", "a\u2581",    " ",      "  ",
      ".",      "'",      "n't",    " do",    " not",         "do",      "<pad>",      "|",      "##",
      "##b",    "</w>",   "a</w>",  "b</w>a", "\u4e2d",       "\u00e9",  "\U0001F600", "\uFFFD", "<0x41>",
      "<0xE4>", "<0xB8>", "<0xAD>", "<0xFF>", "<0x80>",       "<0x",     "E4>",        "\u0120", "\u0120\u0120",
      "\u00c3", "\u00a9", "\u00e4", "\u00b8", "\u0143",       "x ",      " x"};
  const std::vector<std::string> decoders = {
      R"({"type": "ByteLevel"})",
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})",
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"})",
      R"({"type": "Replace", "pattern": {"String": "▁"}, "content": " "})",
      R"({"type": "Replace", "pattern": {"String": "ab"}, "content": "X"})",
      R"({"type": "Replace", "pattern": {"Regex": " +"}, "content": "_"})",
      R"({"type": "ByteFallback"})",
      R"({"type": "Fuse"})",
      R"({"type": "Strip", "content": " ", "start": 1, "stop": 0})",
      R"({"type": "Strip", "content": " ", "start": 2, "stop": 1})",
      R"({"type": "Strip", "content": "a", "start": 0, "stop": 2})",
      R"({"type": "WordPiece", "prefix": "##", "cleanup": true})",
      R"({"type": "WordPiece", "prefix": "##", "cleanup": false})",
      R"({"type": "BPEDecoder", "suffix": "</w>"})",
      R"({"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": true})",
      R"({"type": "CTC", "pad_token": "<pad>", "word_delimiter_token": "|", "cleanup": false})",
      // Odd settings: empty matches, empty prefix and suffix, rewriting into byte tokens.
      R"({"type": "Replace", "pattern": {"Regex": "x*"}, "content": "-"})",
      R"({"type": "Replace", "pattern": {"String": "<0x"}, "content": ""})",
      R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first"})",
      R"({"type": "WordPiece", "prefix": "", "cleanup": true})",
      R"({"type": "BPEDecoder", "suffix": ""})",
      R"({"type": "CTC", "pad_token": "a", "word_delimiter_token": "▁", "cleanup": true})",
      R"({"type": "Strip", "content": "▁", "start": 1, "stop": 1})",
  };
  std::mt19937 rng(4242);
  int windowed = 0;
  for (int chain_round = 0; chain_round < 400; ++chain_round) {
    std::string chain = R"({"type": "Sequence", "decoders": [)";
    size_t n = 1 + rng() % 4;
    for (size_t k = 0; k < n; ++k) chain += (k ? "," : "") + decoders[rng() % decoders.size()];
    chain += "]}";
    auto tok = with_decoder(vocab, chain);
    windowed += tok->decodes_in_window();
    for (int round = 0; round < 25; ++round) {
      std::vector<int32_t> ids(size_t(1 + rng() % 16));
      for (auto& id : ids) id = int32_t(rng() % (vocab.size() + 2));
      INFO("decoder: " << chain);
      check_stream(*tok, ids, round % 2 == 0);
    }
  }
  CHECK(windowed > 0);  // both paths ran
  CHECK(windowed < 400);
}
