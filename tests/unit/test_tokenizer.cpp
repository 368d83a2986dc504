// test_tokenizer.cpp — tokenizer semantics on small hand-written tokenizer.json files, and the
// hostile inputs a tokenizer file can carry (each must end in a clear InputError).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"
#include "tests/unit/input_errors.h"

using spark::InputError;
using spark::Tokenizer;
using json = nlohmann::json;

using spark::testing::tokenizer_error_of;
using spark::testing::tokenizer_from;

namespace {

// A byte-level BPE over a tiny alphabet: merges Ġ+l, o+w, l+ow, Ġl+ow, e+r.
json tiny_byte_level() {
  json vocab = json::object();
  int id = 0;
  for (const char* t : {"l", "o", "w", "e", "r", "Ġ", "ow", "low", "er", "Ġl", "Ġlow", "n", "s", "t", "<", ">", "|", "x"})
    vocab[t] = id++;
  return json{
      {"version", "1.0"},
      {"added_tokens",
       json::array({{{"id", 18}, {"content", "<|x|>"}, {"special", true}, {"lstrip", false}, {"rstrip", false},
                     {"single_word", false}, {"normalized", false}},
                    {{"id", 19}, {"content", "tok"}, {"special", false}, {"lstrip", false}, {"rstrip", false},
                     {"single_word", true}, {"normalized", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<|x|>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<|x|>", {{"id", "<|x|>"}, {"ids", {18}}, {"tokens", {"<|x|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"Ġ l", "o w", "l ow", "Ġl ow", "e r"})},
        {"ignore_merges", false}}}};
}

// A SentencePiece-style BPE with byte fallback, Metaspace-like normalizer and decoder.
json tiny_sentencepiece() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}, {"▁", 3}, {"a", 4}, {"b", 5}, {"▁a", 6}, {"ab", 7}, {"▁ab", 8}};
  int id = 9;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = id++;
  }
  return json{
      {"added_tokens", json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                    {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "▁"}},
                                     {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"▁ a", "a b", "▁a b"})}, {"unk_token", "<unk>"},
        {"fuse_unk", true}, {"byte_fallback", true}}}};
}



}  // namespace

TEST_CASE("tokenizer: byte-level BPE merges, added tokens and the template post-processor") {
  auto tok = tokenizer_from(tiny_byte_level());
  CHECK(tok->encode("low", false) == std::vector<int32_t>{7});
  CHECK(tok->encode("lower low", false) == std::vector<int32_t>{7, 8, 10});
  CHECK(tok->encode("low", true) == std::vector<int32_t>{18, 7});
  // The special token is matched in text, or read literally when parse_special is off.
  CHECK(tok->encode("low<|x|>low", false) == std::vector<int32_t>{7, 18, 7});
  CHECK(tok->encode("low<|x|>", false, false) == std::vector<int32_t>{7, 14, 16, 17, 16, 15});
  // single_word: "tok" is only an added token when not inside a word.
  CHECK(tok->encode("tok", false) == std::vector<int32_t>{19});
  auto inside = tok->encode("xtok", false);
  CHECK(std::find(inside.begin(), inside.end(), 19) == inside.end());
  CHECK(tok->decode({18, 7, 8, 10}) == "<|x|>lower low");
  CHECK(tok->decode({18, 7, 8, 10}, true) == "lower low");
  CHECK(tok->decode({7, 999, 7}) == "lowlow");  // unknown ids are skipped
  CHECK(tok->vocab_size() == 20);
  CHECK(tok->is_special(18));
  CHECK_FALSE(tok->is_special(19));
  CHECK(tok->token_id("<|x|>") == 18);
  CHECK(tok->token_id("Ġlow") == 10);
  CHECK(tok->token_text(10) == "Ġlow");
  CHECK_FALSE(tok->token_id("nope").has_value());
}

TEST_CASE("tokenizer: SentencePiece BPE with byte fallback, unknown fusing and decode repair") {
  auto tok = tokenizer_from(tiny_sentencepiece());
  CHECK(tok->encode("ab a", false) == std::vector<int32_t>{8, 6});
  CHECK(tok->encode("ab a") == std::vector<int32_t>{1, 8, 6});
  // 'é' is not in the vocabulary: it falls back to its two UTF-8 bytes.
  CHECK(tok->encode("é", false) == std::vector<int32_t>{3, 9 + 0xC3, 9 + 0xA9});
  CHECK(tok->decode({1, 8, 6}) == "<s> ab a");
  CHECK(tok->decode({1, 8, 6}, true) == "ab a");
  CHECK(tok->decode({9 + 0xC3, 9 + 0xA9}) == "é");
  // An incomplete byte group becomes one U+FFFD per byte, as in the reference.
  CHECK(tok->decode({4, 9 + 0xE4, 9 + 0xB8, 5}) == "a\xEF\xBF\xBD\xEF\xBF\xBD" "b");
}

TEST_CASE("tokenizer: ill-formed UTF-8 input is read as U+FFFD, like a replacing reader") {
  CHECK(spark::utf8::repair("\xF0\x9F\x98") == "\xEF\xBF\xBD");
  CHECK(spark::utf8::repair("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(spark::utf8::repair("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(spark::utf8::repair("a\x80" "b") == "a\xEF\xBF\xBD" "b");
  auto tok = tokenizer_from(tiny_byte_level());
  CHECK(tok->encode("l\xFFo", false) == tok->encode("l\xEF\xBF\xBDo", false));
}

TEST_CASE("tokenizer: hostile tokenizer.json files end in a clear InputError") {
  SUBCASE("merge producing a string not in the vocabulary") {
    json j = tiny_byte_level();
    j["model"]["merges"].push_back("r s");
    CHECK(tokenizer_error_of(j).find("not in the vocabulary") != std::string::npos);
  }
  SUBCASE("merge naming a token not in the vocabulary") {
    json j = tiny_byte_level();
    j["model"]["merges"].push_back("q s");
    CHECK(tokenizer_error_of(j).find("not in the vocabulary") != std::string::npos);
  }
  SUBCASE("byte tokens <0x-1> and <0xZZ>") {
    for (const char* bad : {"<0x-1>", "<0xZZ>"}) {
      json j = tiny_sentencepiece();
      j["model"]["vocab"][bad] = 400;
      CHECK(tokenizer_error_of(j).find("<0xNN>") != std::string::npos);
    }
  }
  SUBCASE("special token id past the vocabulary") {
    json j = tiny_byte_level();
    j["added_tokens"][0]["id"] = 1000000;
    CHECK(tokenizer_error_of(j).find("outside the vocabulary") != std::string::npos);
    json k = tiny_byte_level();
    k["post_processor"]["special_tokens"]["<|x|>"]["ids"] = {4000};
    CHECK(tokenizer_error_of(k).find("outside the vocabulary") != std::string::npos);
  }
  SUBCASE("vocabulary id far past the number of tokens (fuzz finding: gigabytes for 500 bytes)") {
    json j = tiny_byte_level();
    j["model"]["vocab"]["|"] = 44444420;
    CHECK(tokenizer_error_of(j).find("implausibly large") != std::string::npos);
  }
  SUBCASE("Metaspace decoder with an empty replacement") {
    json j = tiny_sentencepiece();
    j["decoder"] = {{"type", "Metaspace"}, {"replacement", ""}, {"prepend_scheme", "always"}};
    CHECK(tokenizer_error_of(j).find("non-empty 'replacement'") != std::string::npos);
  }
  SUBCASE("catastrophic-backtracking split regex stops with an error, not a hang") {
    json j = tiny_byte_level();
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(x+x+)+$"}}}, {"behavior", "Isolated"}, {"invert", false}};
    auto tok = tokenizer_from(j);
    auto t0 = std::chrono::steady_clock::now();
    std::string err;
    try {
      tok->encode(std::string(4000, 'x') + "!");
    } catch (const InputError& e) {
      err = e.what();
    }
    CHECK(err.find("match limit") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
  }
  SUBCASE("regex that does not compile") {
    json j = tiny_byte_level();
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
    CHECK(tokenizer_error_of(j).find("does not compile") != std::string::npos);
  }
  SUBCASE("malformed documents") {
    CHECK_THROWS_AS(Tokenizer::from_json_text("{not json", ""), InputError);
    CHECK_THROWS_AS(Tokenizer::from_json_text("[]", ""), InputError);
    CHECK_THROWS_AS(Tokenizer::from_json_text("{\"model\": {\"type\": \"BPE\", \"vocab\": []}}", ""), InputError);
    CHECK_THROWS_AS(Tokenizer::from_json_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"x\"}}}", ""), InputError);
    CHECK_THROWS_AS(Tokenizer::from_json_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", ""),
                    InputError);
    json j = tiny_byte_level();
    j["normalizer"] = {{"type", "NoSuchNormalizer"}};
    CHECK(tokenizer_error_of(j).find("unsupported normalizer") != std::string::npos);
    json k = tiny_byte_level();
    k["model"]["type"] = "WordPiece";
    CHECK(tokenizer_error_of(k).find("not supported") != std::string::npos);
  }
}

TEST_CASE("tokenizer: GGUF metadata, and hostile GGUF vocabularies") {
  spark::GgufVocab v;
  v.model = "gpt2";
  v.pre = "smollm";
  v.tokens = {"<|endoftext|>", "a", "b", "ab", "1", "2", "Ġ", "Ġa"};
  v.token_types = {3, 1, 1, 1, 1, 1, 1, 1};
  v.merges = {"a b", "Ġ a"};
  v.bos_id = 0;
  v.eos_id = 0;
  auto tok = Tokenizer::from_gguf_vocab(v);
  CHECK(tok->encode("ab ab12") == std::vector<int32_t>{3, 6, 3, 4, 5});
  CHECK(tok->encode("<|endoftext|>a") == std::vector<int32_t>{0, 1});
  CHECK(tok->decode({3, 7, 2}) == "ab ab");
  CHECK(tok->eos_token() == "<|endoftext|>");
  v.add_bos = true;
  CHECK(Tokenizer::from_gguf_vocab(v)->encode("a") == std::vector<int32_t>{0, 1});

  spark::GgufVocab bad = v;
  bad.eos_id = 99;
  CHECK_THROWS_AS(Tokenizer::from_gguf_vocab(bad), InputError);
  bad = v;
  bad.pre = "no-such-pre";
  CHECK_THROWS_AS(Tokenizer::from_gguf_vocab(bad), InputError);
  bad = v;
  bad.merges.push_back("b b");
  CHECK_THROWS_AS(Tokenizer::from_gguf_vocab(bad), InputError);
  bad = v;
  bad.model = "t5";
  CHECK_THROWS_AS(Tokenizer::from_gguf_vocab(bad), InputError);

  spark::GgufVocab sp;
  sp.model = "llama";
  sp.tokens = {"<unk>", "<s>", "</s>", "<0x41>", "▁", "a", "▁a"};
  sp.scores = {0, 0, 0, 0, -1, -2, -0.5f};
  sp.token_types = {2, 3, 3, 6, 1, 1, 1};
  sp.unk_id = 0;
  sp.bos_id = 1;
  sp.eos_id = 2;
  sp.add_bos = true;
  sp.add_space_prefix = true;
  auto stok = Tokenizer::from_gguf_vocab(sp);
  CHECK(stok->encode("a a") == std::vector<int32_t>{1, 6, 6});
  CHECK(stok->encode("A", false) == std::vector<int32_t>{4, 3});
  CHECK(stok->decode({1, 6, 6}, true) == "a a");
  sp.tokens[3] = "<0xZZ>";
  CHECK_THROWS_AS(Tokenizer::from_gguf_vocab(sp), InputError);
}
