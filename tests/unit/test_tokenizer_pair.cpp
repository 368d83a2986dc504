// test_tokenizer_pair.cpp — text pairs (a cross-encoder's query and document): encode_pair
// against Hugging Face `tokenizers`' encode(a, b) (tests/golden/tokenizer/pairs.json, written by
// tests/gen/gen_tokenizer_pair_golden.py) on the real fixture tokenizers and on every
// post-processor kind, and the GGUF form, laid out as llama.cpp's server lays out a rerank input.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/precompiled_charsmap.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"
#include "tests/unit/fixture_files.h"
#include "tests/unit/input_errors.h"

using spark::InputError;
using spark::Tokenizer;
using json = nlohmann::json;
using Ids = std::vector<int32_t>;

namespace {

json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read " << path);
  std::stringstream ss;
  ss << f.rdbuf();
  return json::parse(ss.str());
}

const json& golden() {
  static const json g = read_json("tests/golden/tokenizer/pairs.json");
  return g;
}

Ids ids_of(const json& j) { return j.get<Ids>(); }

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// The tiny XLM-R tokenizer of the encoder test models with another post-processor.
std::unique_ptr<Tokenizer> tiny_with(const json& post_processor) {
  static const json base = read_json(golden()["tiny_tokenizer"].get<std::string>() + "/tokenizer.json");
  json j = base;
  j["post_processor"] = post_processor;
  return spark::testing::tokenizer_from(j);
}

void check_pairs(const Tokenizer& tok, const json& expected) {
  const json& pairs = golden()["pairs"];
  for (size_t i = 0; i < pairs.size(); ++i) {
    const std::string a = pairs[i][0], b = pairs[i][1];
    CAPTURE(a);
    CAPTURE(b);
    CHECK(tok.encode_pair(a, b) == ids_of(expected["ids"][i]));
    CHECK(tok.encode_pair(a, b, false) == ids_of(expected["ids_plain"][i]));
  }
}

}  // namespace

TEST_CASE("tokenizer pair: encode_pair matches the reference on the real tokenizers") {
  for (const auto& [name, expected] : golden()["fixtures"].items()) {
    CAPTURE(name);
    const std::string dir = spark::testing::fixtures_dir() + "/tokenizers/" + name;
    REQUIRE_MESSAGE(std::filesystem::exists(dir + "/tokenizer.json"), "missing " << dir << " " << spark::testing::fixtures_hint());
    auto tok = Tokenizer::load(dir);
    check_pairs(*tok, expected);
  }
}

TEST_CASE("tokenizer pair: every post-processor kind, as the reference joins a pair") {
  for (const auto& [name, expected] : golden()["variants"].items()) {
    CAPTURE(name);
    check_pairs(*tiny_with(expected["post_processor"]), expected);
  }
}

TEST_CASE("tokenizer pair: a Sequence's stages see each other's sequences, for single texts too") {
  const json& pairs = golden()["pairs"];
  for (const auto& [name, expected] : golden()["singles"].items()) {
    CAPTURE(name);
    auto tok = tiny_with(expected["post_processor"]);
    for (size_t i = 0; i < pairs.size(); ++i) {
      const std::string text = pairs[i][0];
      CAPTURE(text);
      CHECK(tok->encode(text) == ids_of(expected["ids"][i]));
    }
  }
}

TEST_CASE("tokenizer pair: the tiny reranker's golden ids are encode_pair's") {
  const std::string dir = golden()["tiny_tokenizer"].get<std::string>();
  auto tok = Tokenizer::load(dir);
  const json rerank = read_json(dir + "/golden.json");
  REQUIRE(rerank["cases"].size() > 0);
  for (const auto& c : rerank["cases"]) {
    CAPTURE(c["query"].get<std::string>());
    CHECK(tok->encode_pair(c["query"].get<std::string>(), c["document"].get<std::string>()) == ids_of(c["ids"]));
  }
}

TEST_CASE("tokenizer pair: GGUF affixes lay a pair out as llama.cpp's rerank input") {
  // [BOS] a [EOS] [SEP] b [EOS]; without a SEP, [BOS] a [EOS] b [EOS].
  const Ids a = {5, 6}, b = {7};
  auto with_sep = spark::make_affix_processor({0}, {2}, {2});
  Ids ids = a;
  with_sep->process_pair(ids, b, true);
  CHECK(ids == Ids{0, 5, 6, 2, 2, 7, 2});
  ids = a;
  with_sep->process_pair(ids, b, false);
  CHECK(ids == Ids{5, 6, 7});
  auto no_sep = spark::make_affix_processor({1}, {});
  ids = a;
  no_sep->process_pair(ids, b, true);
  CHECK(ids == Ids{1, 5, 6, 7});
  ids = a;
  no_sep->process(ids, true);
  CHECK(ids == Ids{1, 5, 6});

  // A GGUF "t5" vocabulary adding BOS and EOS: the XLM-R fixture's pieces of each text (the
  // reference's ids without special tokens) between them.
  const json& xlmr = golden()["fixtures"]["xlmr"];
  const std::string dir = spark::testing::fixtures_dir() + "/tokenizers/xlmr";
  REQUIRE_MESSAGE(std::filesystem::exists(dir + "/tokenizer.json"), "missing " << dir << " " << spark::testing::fixtures_hint());
  const json tj = read_json(dir + "/tokenizer.json");
  spark::GgufVocab v;
  v.model = "t5";
  for (const auto& e : tj["model"]["vocab"]) {
    v.tokens.push_back(e[0].get<std::string>());
    v.scores.push_back(e[1].get<float>());
    v.token_types.push_back(1);
  }
  for (int32_t id : {0, 1, 2, int32_t(v.tokens.size()) - 1}) v.token_types[size_t(id)] = 3;
  v.token_types[3] = 2;
  v.precompiled_charsmap = spark::decode_base64(
      tj["normalizer"]["normalizers"][0]["precompiled_charsmap"].get<std::string>(), "charsmap");
  v.bos_id = 0;
  v.eos_id = 2;
  v.unk_id = 3;
  v.pad_id = 1;
  v.add_bos = v.add_eos = v.add_space_prefix = v.remove_extra_whitespaces = true;
  auto gguf = Tokenizer::from_gguf_vocab(v);
  const json& pairs = golden()["pairs"];
  for (size_t i = 0; i < pairs.size(); ++i) {
    const std::string qa = pairs[i][0], qb = pairs[i][1];
    CAPTURE(qa);
    CAPTURE(qb);
    const Ids pa = ids_of(xlmr["a_plain"][i]), pb = ids_of(xlmr["b_plain"][i]);
    CHECK(gguf->encode_pair(qa, qb) == concat({{0}, pa, {2}, pb, {2}}));
    CHECK(gguf->encode_pair(qa, qb, false) == concat({pa, pb}));
  }
}

TEST_CASE("tokenizer pair: malformed pair templates end in a clear InputError") {
  const json bad_sequence = {{"type", "TemplateProcessing"},
                             {"single", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                             {"pair", json::array({{{"Sequence", {{"id", "C"}, {"type_id", 0}}}}})},
                             {"special_tokens", json::object()}};
  CHECK_THROWS_WITH_AS(tiny_with(bad_sequence), doctest::Contains("must be A or B"), InputError);
  json not_array = bad_sequence;
  not_array["pair"] = "A B";
  CHECK_THROWS_WITH_AS(tiny_with(not_array), doctest::Contains("'pair' must be an array"), InputError);
  json undefined = bad_sequence;
  undefined["pair"] = json::array({{{"SpecialToken", {{"id", "<x>"}, {"type_id", 0}}}}});
  CHECK_THROWS_WITH_AS(tiny_with(undefined), doctest::Contains("'<x>' is not defined"), InputError);
  json out_of_range = bad_sequence;
  out_of_range["pair"] = json::array({{{"SpecialToken", {{"id", "<x>"}, {"type_id", 0}}}}});
  out_of_range["special_tokens"] = {{"<x>", {{"id", "<x>"}, {"ids", {1 << 20}}, {"tokens", {"<x>"}}}}};
  CHECK_THROWS_WITH_AS(tiny_with(out_of_range), doctest::Contains("outside the vocabulary"), InputError);
  // A template without a pair form joins the two texts as they are (the reference's default
  // pair template, $A $B: what no post-processor at all gives).
  json no_pair = bad_sequence;
  no_pair.erase("pair");
  const json& pairs = golden()["pairs"];
  const json& none = golden()["variants"]["none"];
  auto tok = tiny_with(no_pair);
  for (size_t i = 0; i < pairs.size(); ++i)
    CHECK(tok->encode_pair(pairs[i][0].get<std::string>(), pairs[i][1].get<std::string>()) == ids_of(none["ids"][i]));
}
