// Pooling, normalisation and reranker heads of embedders and rerankers
// (engine/model/pooling.h), with numbers worked out by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/model/architecture.h"
#include "engine/model/pooling.h"
#include "engine/util/check.h"
#include "tests/unit/temp_dir.h"

namespace spark {
namespace {

namespace fs = std::filesystem;

using spark::testing::TempDir;

ModelInfo info_for(const std::string& role, const fs::path& dir, int64_t hidden) {
  ModelInfo info;
  info.role = role;
  info.path = dir.string();
  info.spec.hidden_size = hidden;
  info.spec.arch = find_hf_architecture("Qwen3ForCausalLM");
  return info;
}

std::optional<int32_t> no_tokens(const std::string&) { return std::nullopt; }

const char* kLastToken = R"([{"type": "sentence_transformers.models.Transformer", "path": ""},
  {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}])";

}  // namespace

TEST_CASE("embedding_of normalises, and cuts to `dimensions` before normalising again") {
  PoolingModel m;
  m.hidden_size = 3;
  const std::vector<float> h = {3.0f, 4.0f, 12.0f};  // |h| = 13
  std::vector<float> v = embedding_of(m, h, 0);
  CHECK(v[0] == doctest::Approx(3.0 / 13));
  CHECK(v[2] == doctest::Approx(12.0 / 13));
  v = embedding_of(m, h, 2);  // (3, 4) / 5
  REQUIRE(v.size() == 2);
  CHECK(v[0] == doctest::Approx(0.6));
  CHECK(v[1] == doctest::Approx(0.8));
  m.normalize = false;
  CHECK(embedding_of(m, h, 0) == h);  // a model that does not normalise gives its state
  CHECK(embedding_of(m, std::vector<float>{0.0f, 0.0f, 0.0f}, 2) == std::vector<float>{0.0f, 0.0f});  // no NaN
}

TEST_CASE("a reranker's score is the sigmoid of its row's product with the state, plus the bias") {
  PoolingModel m;
  m.score_row = {1.0f, -2.0f};
  m.score_bias = 0.5f;
  const std::vector<float> h = {2.0f, 1.0f};  // 2 - 2 + 0.5 = 0.5
  CHECK(m.score(h) == doctest::Approx(1.0 / (1.0 + std::exp(-0.5))));
}

TEST_CASE("a cross-encoder's classifier maps the state through tanh(W h + b) before its row") {
  PoolingModel m;
  m.score_dense = {1.0f, 0.0f, 0.5f, -1.0f};  // rows [1, 0] and [0.5, -1]
  m.score_dense_bias = {0.0f, 0.25f};
  m.score_row = {2.0f, 1.0f};
  m.score_bias = -0.5f;
  const std::vector<float> h = {0.5f, 0.25f};  // tanh(0.5), tanh(0.25 - 0.25 + 0.25)
  const double z = 2.0 * std::tanh(0.5) + std::tanh(0.25) - 0.5;
  CHECK(m.score(h) == doctest::Approx(1.0 / (1.0 + std::exp(-z))));
}

TEST_CASE("rerank prompts fill each placeholder of the template once, left to right") {
  PoolingModel m;
  m.rerank_template = "I:{instruction}|Q:{query}|D:{document}";
  m.default_instruction = "find";
  CHECK(m.rerank_prompt("q {document}", "d {query}", "") == "I:find|Q:q {document}|D:d {query}");
  CHECK(m.rerank_prompt("q", "d", "mine") == "I:mine|Q:q|D:d");
}

TEST_CASE("sentence-transformers' folder says the pooling and whether the vector is normalised") {
  TempDir dir("sparkd-pooling");
  PoolingModel m = read_pooling_model(info_for("embed", dir.path, 4), no_tokens);  // no modules.json: last, normalised
  CHECK(m.pooling == Pooling::LAST);
  CHECK(m.normalize);
  dir.write("modules.json", kLastToken);
  dir.write("1_Pooling/config.json", R"({"pooling_mode_lasttoken": true, "pooling_mode_cls_token": false})");
  m = read_pooling_model(info_for("embed", dir.path, 4), no_tokens);
  CHECK(m.pooling == Pooling::LAST);
  CHECK_FALSE(m.normalize);  // no Normalize module
  dir.write("1_Pooling/config.json", R"({"pooling_mode_mean_tokens": true})");
  CHECK_THROWS_WITH_AS(read_pooling_model(info_for("embed", dir.path, 4), no_tokens),
                       doctest::Contains("pools with mean"), InputError);
}

TEST_CASE("hostile sentence-transformers files are refused by name") {
  TempDir dir("sparkd-pooling");
  const auto refuses = [&](const std::string& modules, const std::string& pooling, const char* words) {
    dir.write("modules.json", modules);
    dir.write("1_Pooling/config.json", pooling);
    CHECK_THROWS_WITH_AS(read_pooling_model(info_for("embed", dir.path, 4), no_tokens), doctest::Contains(words), InputError);
  };
  refuses("{", "{}", "not valid JSON");
  refuses(R"({"a": 1})", "{}", "must be a list");
  refuses(kLastToken, R"({"pooling_mode_lasttoken": true, "pooling_mode_cls_token": true})", "exactly one");
  refuses(kLastToken, R"({})", "exactly one");
  refuses(R"([{"type": "sentence_transformers.models.Pooling", "path": "../x"}])", "{}", "leaves the folder");
  refuses(R"([{"type": "sentence_transformers.models.Pooling", "path": "2_Pooling"}])", "{}", "is missing");
  refuses(kLastToken, R"({"pooling_mode_max_tokens": true})", "not a pooling sparkd runs");
}

TEST_CASE("a causal-LM reranker scores with its LM head's \"yes\" row minus its \"no\" row") {
  TempDir dir("sparkd-pooling");
  ModelInfo info = info_for("rerank", dir.path, 2);
  const std::vector<float> head = {0, 0, 1, 2, 5, -1};  // rows 0..2: "no" is 1, "yes" is 2
  Tensor t;
  t.name = "lm_head.weight";
  t.dtype = DType::F32;
  t.shape = {3, 2};
  t.data = head.data();
  t.nbytes = head.size() * 4;
  info.tensors[t.name] = t;
  const auto vocab = [](const std::string& s) -> std::optional<int32_t> {
    if (s == "yes") return 2;
    if (s == "no") return 1;
    return std::nullopt;
  };
  PoolingModel m = read_pooling_model(info, vocab);
  CHECK(m.score_row == std::vector<float>{4.0f, -3.0f});
  CHECK_FALSE(m.normalize);
  CHECK(m.rerank_template.find("{query}") != std::string::npos);
  CHECK_THROWS_WITH_AS(read_pooling_model(info, no_tokens), doctest::Contains("\"yes\" and \"no\""), InputError);
  const auto out_of_range = [](const std::string& s) -> std::optional<int32_t> { return s == "yes" ? 7 : 1; };
  CHECK_THROWS_WITH_AS(read_pooling_model(info, out_of_range), doctest::Contains("has no row 7"), InputError);
}

}  // namespace spark

namespace spark {

TEST_CASE("a reranker's classifier: one row with its bias, or two labelled \"yes\" and \"no\" in a GGUF") {
  testing::TempDir dir("sparkd-pooling");
  ModelInfo info = info_for("rerank", dir.path, 2);
  const std::vector<float> one = {0.5f, -1.0f}, bias = {0.25f}, three = {1, 2, 3, 4, 5, 6};
  Tensor w;
  w.name = "score.weight";
  w.dtype = DType::F32;
  w.shape = {1, 2};
  w.data = one.data();
  w.nbytes = 8;
  Tensor b;
  b.name = "score.bias";
  b.dtype = DType::F32;
  b.shape = {1};
  b.data = bias.data();
  b.nbytes = 4;
  info.tensors[w.name] = w;
  info.tensors[b.name] = b;
  PoolingModel m = read_pooling_model(info, no_tokens);
  CHECK(m.score_row == one);
  CHECK(m.score_bias == 0.25f);
  // Three rows, or two without labels (a Hugging Face folder has none): which is "yes"?
  w.shape = {3, 2};
  w.data = three.data();
  w.nbytes = 24;
  info.tensors[w.name] = w;
  info.tensors.erase(b.name);
  CHECK_THROWS_WITH_AS(read_pooling_model(info, no_tokens), doctest::Contains("classifier has 3 rows"), InputError);
  w.shape = {2, 2};
  info.tensors[w.name] = w;
  CHECK_THROWS_WITH_AS(read_pooling_model(info, no_tokens), doctest::Contains("classifier.output_labels"), InputError);
  b.shape = {2};  // a bias of the wrong length
  info.tensors[b.name] = b;
  w.shape = {1, 2};
  info.tensors[w.name] = w;
  CHECK_THROWS_WITH_AS(read_pooling_model(info, no_tokens), doctest::Contains("one value per row"), InputError);
}

}  // namespace spark
