// test_load_quantization.cpp — which weights [model] quantize changes (served_dtype) and
// what quantize_weights leaves in the registry: the type, the bytes, the scale blocks, the
// values within a step of the source, the kept parts untouched. Logits against models
// quantized offline by gguf and numpy: tests/integration/test_load_quantization.py.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/model/load_quantization.h"
#include "engine/model/model_loader.h"
#include "engine/model/quant.h"
#include "engine/peer/model_identity.h"

using namespace spark;

namespace {

WeightQuantization quantization(const std::string& to, std::vector<std::string> keep = {}) {
  ModelConfig m;
  m.quantize = to;
  m.quantize_keep = std::move(keep);
  return weight_quantization(m);
}

std::vector<float> row_of(const Tensor& t, int64_t r) {
  std::vector<float> v(size_t(t.cols()));
  dequantize_tensor_row(t, r, v.data());
  return v;
}

}  // namespace

TEST_CASE("load quantization: the parts, types and rows it changes") {
  ModelSpec s;
  s.hidden_size = 64;
  const WeightQuantization q8 = quantization("q8_0"), fp8 = quantization("fp8");
  CHECK(!quantization("none").active());
  CHECK(served_dtype(quantization("none"), s, Part::Q, DType::BF16, 64) == DType::BF16);
  for (Part p : {Part::Q, Part::K, Part::V, Part::O, Part::GATE, Part::UP, Part::DOWN, Part::EXPERT_GATE,
                 Part::EXPERT_DOWN, Part::SHARED_UP, Part::LIN_QKV, Part::LIN_OUT, Part::LM_HEAD, Part::EMBEDDING}) {
    CHECK(served_dtype(q8, s, p, DType::BF16, 64) == DType::Q8_0);
    CHECK(served_dtype(q8, s, p, DType::F32, 64) == DType::Q8_0);
  }
  // Routers, the shared expert's one-row gate and vectors stay; so do quantized tensors.
  for (Part p : {Part::ROUTER, Part::SHARED_EXPERT_GATE, Part::ATTN_NORM, Part::Q_BIAS, Part::LIN_CONV})
    CHECK(served_dtype(q8, s, p, DType::BF16, 64) == DType::BF16);
  for (DType d : {DType::Q4_K, DType::MXFP4, DType::F8_E4M3, DType::Q8_0})
    CHECK(served_dtype(fp8, s, Part::Q, d, 256) == d);
  // Q8_0 needs whole 32-value blocks along the row; FP8 takes any row.
  CHECK(served_dtype(q8, s, Part::DOWN, DType::F16, 48) == DType::F16);
  CHECK(served_dtype(fp8, s, Part::DOWN, DType::F16, 48) == DType::F8_E4M3);
  // FP8 leaves the embedding table alone, a tied head included; Q8_0 takes a tied head
  // with either part chosen.
  CHECK(served_dtype(fp8, s, Part::EMBEDDING, DType::BF16, 64) == DType::BF16);
  CHECK(served_dtype(fp8, s, Part::LM_HEAD, DType::BF16, 64) == DType::F8_E4M3);
  const WeightQuantization keep_table = quantization("q8_0", {"embedding"});
  CHECK(served_dtype(keep_table, s, Part::EMBEDDING, DType::BF16, 64) == DType::BF16);
  s.tie_word_embeddings = true;
  CHECK(served_dtype(keep_table, s, Part::EMBEDDING, DType::BF16, 64) == DType::Q8_0);
  const WeightQuantization keep_both = quantization("q8_0", {"embedding", "lm_head"});
  CHECK(served_dtype(keep_both, s, Part::EMBEDDING, DType::BF16, 64) == DType::BF16);
  // quantize_keep by name.
  const WeightQuantization keep = quantization("q8_0", {"attention", "experts"});
  CHECK(served_dtype(keep, s, Part::Q, DType::BF16, 64) == DType::BF16);
  CHECK(served_dtype(keep, s, Part::LIN_Z, DType::BF16, 64) == DType::BF16);
  CHECK(served_dtype(keep, s, Part::SHARED_DOWN, DType::BF16, 64) == DType::BF16);
  CHECK(served_dtype(keep, s, Part::GATE, DType::BF16, 64) == DType::Q8_0);
  CHECK(describe_quantization(keep) == "q8_0 (mlp, lm_head, embedding)");
  CHECK(describe_quantization(quantization("fp8", {"attention", "mlp", "experts", "lm_head", "embedding"})) ==
        "fp8 (no part)");
}

TEST_CASE("load quantization: Q8_0 in the registry, in place, the kept parts untouched") {
  Config c = config_for_model("tests/golden/models/qwen3_moe");
  c.model.quantize = "q8_0";
  c.model.quantize_keep = {"experts"};
  LoadedModel m = load_model(c);
  const Weights& w = m.weights;
  const std::string q_name = "model.layers.0.self_attn.q_proj.weight";
  const Tensor* q = w.find(q_name);
  const Tensor source = *q;
  std::vector<std::vector<float>> before;
  for (int64_t r = 0; r < source.rows(); ++r) before.push_back(row_of(source, r));
  const Tensor expert = w.get("model.layers.2.mlp.experts.3.down_proj.weight");
  const Tensor router = w.get("model.layers.2.mlp.gate.weight");
  const uint64_t planned = stage_weight_bytes(m.info, full_range(m.info.spec));
  CHECK(planned < w.total_bytes());

  quantize_weights(m.weights, m.info.spec, m.info.quantize);
  CHECK(w.find(q_name) == q);  // the same address: bound tables stay valid
  CHECK(q->dtype == DType::Q8_0);
  CHECK(q->nbytes == size_t(q->rows() * q->cols() / 32 * 34));
  CHECK(w.total_bytes() == planned);  // what the plan counted
  // Half a step, and the step's rounding to f16 (2^-11 of it) times up to 127 (llama.cpp
  // rounds to the f32 step, then stores it as f16).
  for (int64_t r = 0; r < q->rows(); ++r) {
    const std::vector<float> after = row_of(*q, r);
    for (int64_t b = 0; b < q->cols() / 32; ++b) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(before[size_t(r)][size_t(32 * b + i)]));
      for (int i = 0; i < 32; ++i) {
        const size_t k = size_t(32 * b + i);
        REQUIRE(std::fabs(after[k] - before[size_t(r)][k]) <= amax / 127 * 0.563f + 1e-7f);
      }
    }
  }
  // quantize_keep = ["experts"]: the experts as stored; the router is never quantized.
  CHECK(w.get(expert.name).dtype == expert.dtype);
  CHECK(w.get(expert.name).data == expert.data);
  CHECK(w.get(router.name).data == router.data);
  CHECK(w.get("model.embed_tokens.weight").dtype == DType::Q8_0);
  CHECK(w.get("lm_head.weight").dtype == DType::Q8_0);
  CHECK(w.get("model.norm.weight").dtype == DType::F32);
}

TEST_CASE("load quantization: FP8 takes an FP8 checkpoint's scale blocks for its 16-bit head") {
  // llama_fp8_block: e4m3 layers in 128x128 blocks, the head in BF16.
  Config c = config_for_model("tests/golden/models/llama_fp8_block");
  c.model.quantize = "fp8";
  LoadedModel m = load_model(c);
  const Tensor head = m.weights.get("lm_head.weight");
  REQUIRE(head.dtype == DType::BF16);
  std::vector<std::vector<float>> before;
  for (int64_t r = 0; r < head.rows(); ++r) before.push_back(row_of(head, r));
  const Tensor q = m.weights.get("model.layers.0.self_attn.q_proj.weight");

  quantize_weights(m.weights, m.info.spec, m.info.quantize);
  const Tensor& t = m.weights.get("lm_head.weight");
  REQUIRE(t.dtype == DType::F8_E4M3);
  CHECK(t.scale_block_rows == 128);
  CHECK(t.scale_block_cols == 128);
  CHECK(t.scale_grid_rows() * t.scale_grid_cols() == 4);
  CHECK(m.weights.get(q.name).data == q.data);  // already FP8
  CHECK(m.weights.get("model.embed_tokens.weight").dtype == DType::BF16);
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 2; ++bc) {
      float amax = 0;
      for (int64_t r = 128 * br; r < 128 * br + 128; ++r)
        for (int64_t k = 128 * bc; k < 128 * bc + 128; ++k) amax = std::max(amax, std::fabs(before[size_t(r)][size_t(k)]));
      const float scale = t.scale[br * 2 + bc];
      CHECK(scale == doctest::Approx(amax / 448.0f).epsilon(1e-6));
      // e4m3 keeps 3 mantissa bits: within 1/16 of each value, or of the smallest normal step.
      for (int64_t r = 128 * br; r < 128 * br + 128; ++r) {
        const std::vector<float> after = row_of(t, r);
        for (int64_t k = 128 * bc; k < 128 * bc + 128; ++k) {
          const float x = before[size_t(r)][size_t(k)];
          REQUIRE(std::fabs(after[size_t(k)] - x) <= std::max(std::fabs(x) / 16, scale * 0.0009765625f));
        }
      }
    }
}

TEST_CASE("load quantization: a pair's boxes must agree on it") {
  Config c = config_for_model("tests/golden/models/llama");
  const ModelInfo plain = inspect_model(c);
  c.model.quantize = "q8_0";
  const ModelInfo q8 = inspect_model(c);
  c.model.quantize_keep = {"lm_head"};
  const ModelInfo q8_keep = inspect_model(c);
  CHECK(model_fingerprint(plain) != model_fingerprint(q8));
  CHECK(model_fingerprint(q8) != model_fingerprint(q8_keep));
  CHECK(model_label(q8).find("quantized at load: q8_0 (attention, mlp, experts, lm_head, embedding)") != std::string::npos);
  CHECK(model_label(plain).find("quantized") == std::string::npos);
}

TEST_CASE("load quantization: dummy weights are made quantized, as the plan counts them") {
  for (const char* to : {"q8_0", "fp8"}) {
    Config c = config_for_model("tests/golden/models/qwen3_moe");
    c.model.load_format = "dummy";
    c.model.quantize = to;
    LoadedModel m = load_model(c);
    const DType want = std::string(to) == "q8_0" ? DType::Q8_0 : DType::F8_E4M3;
    CHECK(m.weights.get("model.layers.0.self_attn.o_proj.weight").dtype == want);
    CHECK(m.weights.get("model.layers.0.mlp.experts.5.up_proj.weight").dtype == want);
    CHECK(m.weights.get("model.layers.0.mlp.gate.weight").dtype != want);
    const uint64_t planned = stage_weight_bytes(m.info, full_range(m.info.spec));
    uint64_t held = 0;
    for (const auto& [name, t] : m.weights.all())
      held += t.nbytes + (t.scale ? uint64_t(t.scale_grid_rows() * t.scale_grid_cols()) * 4 : 0);
    CHECK(held == planned);
  }
}
