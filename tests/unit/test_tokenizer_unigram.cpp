// test_tokenizer_unigram.cpp — the SentencePiece Unigram model and the Precompiled normalizer on
// hand-made vocabularies and charsmaps (every expected value worked out by hand from the scores
// and rules written here), and hostile tokenizer.json inputs for both.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "engine/tokenizer/precompiled_charsmap.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/check.h"
#include "tests/unit/fixture_files.h"
#include "tests/unit/input_errors.h"

using spark::InputError;
using spark::Tokenizer;
using json = nlohmann::json;
using Ids = std::vector<int32_t>;
using spark::GgufVocab;

using spark::testing::tokenizer_error_of;
using spark::testing::tokenizer_from;

namespace {

json unigram(json vocab, json unk_id = 0, bool byte_fallback = false, json normalizer = nullptr, json decoder = nullptr) {
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", normalizer},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", decoder},
              {"model", {{"type", "Unigram"}, {"unk_id", unk_id}, {"vocab", vocab}, {"byte_fallback", byte_fallback}}}};
}



// Pieces a b c ab bc abc with log-probabilities -1 -2 -2 -2.5 -3.5 -6; <unk> is id 0.
json abc_vocab() {
  return json::array({{"<unk>", 0.0}, {"a", -1.0}, {"b", -2.0}, {"c", -2.0}, {"ab", -2.5}, {"bc", -3.5}, {"abc", -6.0}});
}

// <unk>, "a" and the 256 byte pieces <0x00>..<0xFF> (ids 2..257).
json byte_vocab() {
  json v = json::array({{"<unk>", 0.0}, {"a", -1.0}});
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    v.push_back({name, -5.0});
  }
  return v;
}

std::string le32(uint32_t v) {
  return std::string{char(v & 0xFF), char((v >> 8) & 0xFF), char((v >> 16) & 0xFF), char(v >> 24)};
}

// A precompiled charsmap for `rules`, laid out as the simplest valid double array: node n owns
// units [256(n+1), 256(n+2)), its child for byte c sits at its block start + c, and a node
// that ends a key keeps its value unit (bit 31 set) at slot 0 of its own block.
std::string charsmap(const std::vector<std::pair<std::string, std::string>>& rules) {
  std::vector<std::map<uint8_t, size_t>> kids(1);
  std::vector<int64_t> value(1, -1);
  std::string strings;
  for (const auto& [key, replacement] : rules) {
    size_t n = 0;
    for (unsigned char c : key) {
      if (!kids[n].count(c)) {
        kids.emplace_back();
        value.push_back(-1);
        kids[n][c] = kids.size() - 1;
      }
      n = kids[n][c];
    }
    value[n] = int64_t(strings.size());
    strings += replacement;
    strings.push_back('\0');
  }
  auto base = [](size_t n) { return uint32_t(256 * (n + 1)); };
  std::vector<uint32_t> units(256 * (kids.size() + 1), 0);
  units[0] = base(0) << 10;
  for (size_t n = 0; n < kids.size(); ++n)
    for (const auto& [c, m] : kids[n]) {
      const uint32_t pos = base(n) + c;
      units[pos] = ((pos ^ base(m)) << 10) | (value[m] >= 0 ? 1u << 8 : 0) | c;
      if (value[m] >= 0) units[base(m)] = (1u << 31) | uint32_t(value[m]);
    }
  std::string blob = le32(uint32_t(units.size() * 4));
  for (uint32_t u : units) blob += le32(u);
  return blob + strings;
}

std::string base64(const std::string& bytes) {
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t g = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) g |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) g |= uint8_t(bytes[i + 2]);
    out += digits[g >> 18];
    out += digits[(g >> 12) & 63];
    out += i + 1 < bytes.size() ? digits[(g >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? digits[g & 63] : '=';
  }
  return out;
}

json precompiled(const std::string& blob) { return {{"type", "Precompiled"}, {"precompiled_charsmap", base64(blob)}}; }

// A -> b, CR -> space, e + U+0301 -> é, the ligature ﬁ -> fi, x -> nothing.
const std::vector<std::pair<std::string, std::string>> RULES = {
    {"A", "b"}, {"\r", " "}, {"e\xCC\x81", "\xC3\xA9"}, {"\xEF\xAC\x81", "fi"}, {"x", ""}};

// The XLM-R fixture's vocabulary as llama.cpp's converter writes it to GGUF ("t5"): pieces,
// float scores, token types, the charsmap's bytes, BOS and EOS added, extra spaces removed.
GgufVocab xlmr_as_gguf(const json& tokenizer_json) {
  GgufVocab v;
  v.model = "t5";
  for (const auto& e : tokenizer_json["model"]["vocab"]) {
    v.tokens.push_back(e[0].get<std::string>());
    v.scores.push_back(e[1].get<float>());
    v.token_types.push_back(1);
  }
  for (int32_t id : {0, 1, 2, int32_t(v.tokens.size()) - 1}) v.token_types[size_t(id)] = 3;  // <s> <pad> </s> <mask>
  v.token_types[3] = 2;                                                                       // <unk>
  v.precompiled_charsmap = spark::decode_base64(
      tokenizer_json["normalizer"]["normalizers"][0]["precompiled_charsmap"].get<std::string>(), "charsmap");
  v.bos_id = 0;
  v.eos_id = 2;
  v.unk_id = 3;
  v.pad_id = 1;
  v.add_bos = v.add_eos = v.add_space_prefix = v.remove_extra_whitespaces = true;
  return v;
}

}  // namespace

TEST_CASE("unigram: Viterbi keeps the segmentation with the highest total log-probability") {
  auto tok = tokenizer_from(unigram(abc_vocab()));
  // "ab" alone (-2.5) beats "a" + "b" (-3).
  CHECK(tok->encode("ab", false) == Ids{4});
  // "aab": a+a+b = -4, a+ab = -3.5.
  CHECK(tok->encode("aab", false) == Ids{1, 4});
  // "abc": a+bc and ab+c tie at -4.5 (a+b+c -5, abc -6); the tie keeps the path found first,
  // a+bc, reached when the search stands at "b" before it stands at "c".
  CHECK(tok->encode("abc", false) == Ids{1, 5});
  // "cab": c+ab = -4.5, c+a+b = -5.
  CHECK(tok->encode("cab", false) == Ids{3, 4});
  CHECK(tok->encode("", false).empty());
  CHECK(tok->vocab_size() == 7);
  CHECK(tok->token_id("bc") == 5);
  CHECK(tok->token_text(6) == "abc");
  CHECK(tok->decode({1, 5}) == "a bc");  // no decoder: pieces joined by spaces, as in the reference
}

TEST_CASE("unigram: unknown characters cost the lowest score minus 10, and a run of them is one <unk>") {
  auto tok = tokenizer_from(unigram(abc_vocab()));
  CHECK(tok->encode("axb", false) == Ids{1, 0, 2});
  CHECK(tok->encode("axyb", false) == Ids{1, 0, 2});  // x and y fused
  CHECK(tok->encode("xy", false) == Ids{0});
  CHECK(tok->encode("\xE2\x82\xAC", false) == Ids{0});  // one character of three bytes, one <unk>

  // "xb" is a piece (-5, the lowest score, so <unk> costs -15); "b" scores s. <unk> + b wins
  // only when -15 + s > -5, i.e. s > 10: 9.5 keeps "xb", 10.5 takes <unk> + "b".
  auto low = tokenizer_from(unigram(json::array({{"<unk>", 0.0}, {"xb", -5.0}, {"b", 9.5}})));
  CHECK(low->encode("xb", false) == Ids{1});
  auto high = tokenizer_from(unigram(json::array({{"<unk>", 0.0}, {"xb", -5.0}, {"b", 10.5}})));
  CHECK(high->encode("xb", false) == Ids{0, 2});

  // Without an unk_id an uncovered character is an error, as in the reference.
  auto no_unk = tokenizer_from(unigram(abc_vocab(), nullptr));
  CHECK(no_unk->encode("ab", false) == Ids{4});
  CHECK_THROWS_AS(no_unk->encode("ax", false), InputError);
}

TEST_CASE("unigram: byte_fallback spells an unknown run in <0xNN> pieces, all of them or none") {
  json decoder = {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
  auto tok = tokenizer_from(unigram(byte_vocab(), 0, true, nullptr, decoder));
  // € is E2 82 AC: ids 2 + 0xE2, 2 + 0x82, 2 + 0xAC.
  const Ids euro{228, 132, 174};
  CHECK(tok->encode("a\xE2\x82\xAC", false) == Ids{1, 228, 132, 174});
  Ids two_euros = euro;
  two_euros.insert(two_euros.end(), euro.begin(), euro.end());
  two_euros.push_back(1);
  CHECK(tok->encode("\xE2\x82\xAC\xE2\x82\xAC" "a", false) == two_euros);
  CHECK(tok->decode(two_euros) == "\xE2\x82\xAC\xE2\x82\xAC" "a");
  // Only <0xE2> and <0x82> exist: the run cannot be spelled in bytes and is one <unk>.
  auto partial = tokenizer_from(unigram(json::array({{"<unk>", 0.0}, {"a", -1.0}, {"<0xE2>", -5.0}, {"<0x82>", -5.0}}), 0, true));
  CHECK(partial->encode("a\xE2\x82\xAC", false) == Ids{1, 0});
  // byte_fallback off: <unk>, although the byte pieces exist.
  auto off = tokenizer_from(unigram(byte_vocab(), 0, false));
  CHECK(off->encode("a\xE2\x82\xAC", false) == Ids{1, 0});
}

TEST_CASE("unigram: the Precompiled normalizer applies rules per grapheme cluster, as the reference does") {
  spark::PrecompiledCharsmap map(charsmap(RULES), "test charsmap");
  auto norm = [&](std::string s) {
    map.normalize(s);
    return s;
  };
  CHECK(norm("AxA") == "bb");
  CHECK(norm("e\xCC\x81") == "\xC3\xA9");
  CHECK(norm("Ae\xCC\x81") == "b\xC3\xA9");
  CHECK(norm("\xEF\xAC\x81x") == "fi");
  CHECK(norm("\r\r") == "  ");
  CHECK(norm("\n\r") == "\n ");
  // CR LF is one cluster: the rule for its prefix CR replaces the whole cluster.
  CHECK(norm("a\r\nb") == "a b");
  // "A" + U+0301 (3 bytes, one cluster): the rule for "A" replaces the whole cluster.
  CHECK(norm("A\xCC\x81") == "b");
  // A cluster of 6 bytes or more is looked up character by character instead.
  CHECK(norm("A\xCC\x81\xCC\x81\xCC\x81") == "b\xCC\x81\xCC\x81\xCC\x81");
  CHECK(norm("plain words") == "plain words");

  // Through tokenizer.json, before the model: "Ax" normalizes to "b".
  auto tok = tokenizer_from(unigram(abc_vocab(), 0, false, precompiled(charsmap(RULES))));
  CHECK(tok->encode("Ax", false) == Ids{2});
}

TEST_CASE("unigram: a corrupt charsmap never reads out of bounds") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint32_t> units(1 + rng() % 600);
    for (auto& u : units) u = rng() % 4 == 0 ? uint32_t(rng()) : uint32_t(rng() % 0x40000);
    std::string blob = le32(uint32_t(units.size() * 4));
    for (uint32_t u : units) blob += le32(u);
    blob += std::string("ab\0cd", 5);
    spark::PrecompiledCharsmap map(blob, "random charsmap");
    for (std::string s : {"hello", "A\xCC\x81", "\xE2\x82\xAC\r\n", "\xF0\x9F\x98\x80 x"}) {
      map.normalize(s);
      CHECK(spark::utf8::is_valid(s));
    }
  }
}

TEST_CASE("unigram: hostile tokenizer.json inputs end in a clear InputError") {
  auto charsmap_error = [](const std::string& blob_base64) {
    json n = {{"type", "Precompiled"}, {"precompiled_charsmap", blob_base64}};
    return tokenizer_error_of(unigram(abc_vocab(), 0, false, n));
  };
  auto has = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
  SUBCASE("malformed charsmaps name the field") {
    const std::string valid = charsmap(RULES);
    for (const std::string& bad : {std::string("@@@@"), std::string("QUJD="), std::string("AAAA"),
                                   base64(le32(0)),                                  // empty trie
                                   base64(le32(6) + std::string(8, '\0')),           // size not a multiple of 4
                                   base64(le32(4096) + std::string(8, '\0')),        // trie past the end
                                   base64(le32(4) + le32(0) + "\xFF"),               // strings not UTF-8
                                   base64(valid.substr(0, valid.size() / 2))}) {     // truncated
      std::string e = charsmap_error(bad);
      CHECK_MESSAGE(has(e, "precompiled_charsmap"), e);
    }
    json missing = unigram(abc_vocab(), 0, false, {{"type", "Precompiled"}});
    CHECK(has(tokenizer_error_of(missing), "precompiled_charsmap"));
    json null_map = unigram(abc_vocab(), 0, false, {{"type", "Precompiled"}, {"precompiled_charsmap", nullptr}});
    CHECK(has(tokenizer_error_of(null_map), "precompiled_charsmap"));
  }
  SUBCASE("bad vocabulary entries") {
    for (json entry : {json("a"), json::array({"a"}), json::array({"a", "x"}), json::array({1, -1.0}),
                       json::array({"a", -1.0, 3})}) {
      json v = abc_vocab();
      v.push_back(entry);
      CHECK(has(tokenizer_error_of(unigram(v)), "Unigram vocab entry 7"));
    }
    CHECK(has(tokenizer_error_of(unigram(json::array())), "empty"));
    json object_vocab = unigram(json::object({{"a", 0}}));
    CHECK(has(tokenizer_error_of(object_vocab), "'vocab' array"));
  }
  SUBCASE("unk_id outside the vocabulary or not an integer") {
    for (json id : {json(7), json(-1), json(1ll << 40)}) CHECK(has(tokenizer_error_of(unigram(abc_vocab(), id)), "outside the vocabulary"));
    CHECK(has(tokenizer_error_of(unigram(abc_vocab(), "0")), "must be an integer"));
  }
}

TEST_CASE("unigram: a GGUF \"t5\" vocabulary tokenizes as the tokenizer.json it was converted from") {
  const std::string dir = spark::testing::fixtures_dir() + "/tokenizers/xlmr";
  REQUIRE_MESSAGE(std::filesystem::exists(dir + "/tokenizer.json"), "missing " << dir << " " << spark::testing::fixtures_hint());
  std::ifstream in(dir + "/tokenizer.json", std::ios::binary);
  const json tj = json::parse(in);
  auto from_json = Tokenizer::load(dir);
  auto from_gguf = Tokenizer::from_gguf_vocab(xlmr_as_gguf(tj));
  std::vector<std::string> texts = {
      "Hello world", "  leading and   inner  spaces  ", "ｆｕｌｌｗｉｄｔｈ ﬁ ① ㍻", "naïve café e\xCC\x81", "a\r\nb\tc",
      "Привет, мир!", "東京都の天気", "مرحبا بالعالم", "नमस्ते दुनिया", "<s>special</s> text", "\xF0\x9F\x98\x80 emoji",
      ""};
  std::mt19937 rng(11);
  const std::vector<char32_t> pool = {'a', 'Z', ' ', ' ', '\n', '\r', 0x301, 0xE9, 0xFF21, 0x2460, 0x3000, 0x4E2D, 0x0915,
                                      0x094D, 0x1F600, 0xAC00, 0x0627, 0xFB01, 0x200B, 0xA0};
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (size_t n = 1 + rng() % 12; n > 0; --n) spark::utf8::append(s, pool[rng() % pool.size()]);
    texts.push_back(s);
  }
  for (const auto& text : texts) {
    const Ids ids = from_json->encode(text);
    CHECK_MESSAGE(from_gguf->encode(text) == ids, text);
    CHECK_MESSAGE(from_gguf->decode(ids) == from_json->decode(ids), text);
    CHECK_MESSAGE(from_gguf->decode(ids, true) == from_json->decode(ids, true), text);
  }
}

TEST_CASE("unigram: hostile GGUF \"t5\" vocabularies end in a clear InputError") {
  GgufVocab v;
  v.model = "t5";
  v.tokens = {"<pad>", "</s>", "<unk>", "a"};
  v.scores = {0, 0, 0, -1};
  v.unk_id = 2;
  CHECK(Tokenizer::from_gguf_vocab(v)->encode("a", false) == Ids{3});
  SUBCASE("no scores") {
    v.scores.clear();
    CHECK_THROWS_WITH_AS(Tokenizer::from_gguf_vocab(v), doctest::Contains("scores"), InputError);
  }
  SUBCASE("malformed charsmap") {
    v.precompiled_charsmap = le32(400) + "abcd";
    CHECK_THROWS_WITH_AS(Tokenizer::from_gguf_vocab(v), doctest::Contains("precompiled_charsmap"), InputError);
  }
  SUBCASE("a score that is not a number") {
    v.scores[3] = NAN;
    CHECK_THROWS_WITH_AS(Tokenizer::from_gguf_vocab(v), doctest::Contains("finite"), InputError);
  }
  SUBCASE("unknown-token id outside the vocabulary") {
    v.unk_id = 9;
    CHECK_THROWS_AS(Tokenizer::from_gguf_vocab(v), InputError);
  }
}
