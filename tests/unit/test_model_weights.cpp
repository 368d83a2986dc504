// test_model_weights.cpp — stage loading from safetensors and GGUF (names, expert views,
// llama Q/K row order, layer ranges), the tensor-set check, and dummy weights.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "engine/model/architecture.h"
#include "engine/model/arch.h"
#include "engine/model/dummy.h"
#include "engine/model/load_weights.h"
#include "engine/model/model_loader.h"
#include "engine/model/quant.h"
#include "engine/util/mmap.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::golden;
using spark::testing::golden_dir;

namespace {

std::vector<float> to_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  int64_t cols = t.cols(), rows = t.rows();
  size_t row_bytes = t.nbytes / static_cast<size_t>(rows);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t.dtype, static_cast<const uint8_t*>(t.data) + row_bytes * r, out.data() + r * cols, cols);
  return out;
}

std::string np_dtype(DType t) {
  switch (t) {
    case DType::F16: return "float16";
    case DType::F32: return "float32";
    default: return std::string(dtype_name(t));
  }
}

ModelInfo inspect(const std::string& path, const std::string& load_format = "auto") {
  Config c = config_for_model(path);
  c.model.load_format = load_format;
  return inspect_model(c);
}

}  // namespace

TEST_CASE("weights: safetensors tensors equal the reference reader's") {
  for (const auto& m : golden()["models"]) {
    CAPTURE(m["arch"].get<std::string>());
    ModelInfo info = inspect(golden_dir() + "/" + m["hf_folder"].get<std::string>());
    CHECK(info.format == ModelFormat::SAFETENSORS);
    REQUIRE(info.tensors.size() == m["hf_tensors"].size());
    for (const auto& [name, ref] : m["hf_tensors"].items()) {
      CAPTURE(name);
      const Tensor& t = info.tensors.at(name);
      CHECK(np_dtype(t.dtype) == ref["dtype"].get<std::string>());
      CHECK(t.shape == ref["shape"].get<std::vector<int64_t>>());
      CHECK(spark::testing::fnv64(t.data, t.nbytes) == ref["fnv64"].get<std::string>());
    }
  }
}

TEST_CASE("weights: GGUF tensors dequantize to what gguf-py reads") {
  for (const auto& m : golden()["models"]) {
    CAPTURE(m["arch"].get<std::string>());
    GgufFile f = GgufFile::open(golden_dir() + "/" + m["gguf"].get<std::string>());
    REQUIRE(f.tensors.size() == m["gguf_tensors"].size());
    for (const GgufTensorInfo& info : f.tensors) {
      CAPTURE(info.name);
      const auto& ref = m["gguf_tensors"][info.name];
      CHECK(info.shape == ref["shape"].get<std::vector<int64_t>>());
      Tensor t{info.name, info.dtype, info.shape, f.tensor_data(info), info.nbytes};
      std::vector<float> v = to_f32(t);
      CHECK(spark::testing::fnv64(v.data(), v.size() * 4) == ref["f32_fnv64"].get<std::string>());
    }
  }
}

TEST_CASE("weights: a GGUF file loads to the same Hugging Face tensors as its source folder") {
  // The GGUF files were converted as llama.cpp does (Q/K rows permuted for llama,
  // experts stacked); loading must undo both, so every tensor equals the original.
  for (const auto& m : golden()["models"]) {
    std::string arch = m["arch"].get<std::string>();
    CAPTURE(arch);
    ModelInfo hf = inspect(golden_dir() + "/" + m["hf_folder"].get<std::string>());
    ModelInfo gg = inspect(golden_dir() + "/" + m["gguf"].get<std::string>());
    CHECK(gg.format == ModelFormat::GGUF);
    Weights wh = load_stage_weights(hf, full_range(hf.spec));
    Weights wg = load_stage_weights(gg, full_range(gg.spec));
    REQUIRE(wh.all().size() == wg.all().size());
    for (const auto& [name, th] : wh.all()) {
      CAPTURE(name);
      const Tensor* tg = wg.find(name);
      REQUIRE(tg != nullptr);
      CHECK(tg->shape == th.shape);
      CHECK(to_f32(*tg) == to_f32(th));
    }
    if (arch == "llama") {
      // And the raw GGUF rows really are permuted: the check above is not vacuous.
      Tensor raw = gguf_hf_tensors(*gg.gguf, gg.spec).at("model.layers.0.self_attn.q_proj.weight");
      CHECK(to_f32(raw) != to_f32(wh.get("model.layers.0.self_attn.q_proj.weight")));
    }
  }
}

TEST_CASE("weights: unpermuting puts interleaved rows back per head") {
  // Two heads of head_dim 4; row r holds the byte r. llama.cpp's layout per head is
  // HF rows [0, 2, 1, 3]; undoing it gives back 0..7.
  std::vector<uint8_t> gguf_rows = {0, 2, 1, 3, 4, 6, 5, 7}, hf(8);
  gguf_unpermute_rows(gguf_rows.data(), hf.data(), 8, 1, 4);
  CHECK(hf == std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("weights: a stage holds its layers plus embedding / final norm / LM head as needed") {
  auto models = golden()["models"];
  ModelInfo llama = inspect(golden_dir() + "/" + models[0]["hf_folder"].get<std::string>());
  REQUIRE(llama.spec.num_layers == 2);
  Weights first = load_stage_weights(llama, {0, 1});
  CHECK(first.find("model.embed_tokens.weight") != nullptr);
  CHECK(first.find("model.layers.0.self_attn.q_proj.weight") != nullptr);
  CHECK(first.find("model.layers.1.self_attn.q_proj.weight") == nullptr);
  CHECK(first.find("model.norm.weight") == nullptr);
  CHECK(first.find("lm_head.weight") == nullptr);
  Weights second = load_stage_weights(llama, {1, 2});
  CHECK(second.find("model.embed_tokens.weight") == nullptr);
  CHECK(second.find("model.layers.1.mlp.down_proj.weight") != nullptr);
  CHECK(second.find("model.norm.weight") != nullptr);
  CHECK(second.find("lm_head.weight") != nullptr);
  CHECK(second.range().first_layer == 1);
  CHECK(first.total_bytes() + second.total_bytes() == load_stage_weights(llama, {0, 2}).total_bytes());
  CHECK_INPUT_ERROR(second.get("model.layers.0.mlp.up_proj.weight"), "is not loaded (layers [1, 2))");
  CHECK_INPUT_ERROR(load_stage_weights(llama, {1, 3}), "is not inside the model's 2 layers");
  CHECK_INPUT_ERROR(load_stage_weights(llama, {1, 1}), "is not inside");
  // Tied embeddings: the last stage needs the embedding as its LM head.
  ModelInfo qwen3 = inspect(golden_dir() + "/" + models[2]["hf_folder"].get<std::string>());
  REQUIRE(qwen3.spec.tie_word_embeddings);
  Weights last = load_stage_weights(qwen3, {1, 2});
  CHECK(last.find("model.embed_tokens.weight") != nullptr);
  CHECK(last.find("lm_head.weight") == nullptr);
  CHECK(last.find("model.layers.1.self_attn.q_norm.weight") != nullptr);
  // MoE: per-expert views, router included.
  ModelInfo moe = inspect(golden_dir() + "/" + models[3]["gguf"].get<std::string>());
  Weights mw = load_stage_weights(moe, {0, 2});
  CHECK(mw.get("model.layers.1.mlp.experts.3.down_proj.weight").shape == std::vector<int64_t>{64, 32});
  CHECK(mw.get("model.layers.0.mlp.gate.weight").shape == std::vector<int64_t>{4, 64});
  CHECK(stage_weight_bytes(moe, {0, 2}) == mw.total_bytes());
}

TEST_CASE("weights: missing, unexpected and misshapen tensors are listed") {
  ModelInfo info = inspect(golden_dir() + "/" + golden()["models"][1]["hf_folder"].get<std::string>());
  auto tensors = info.tensors;
  tensors.erase("model.layers.1.self_attn.k_proj.bias");
  tensors.erase("model.norm.weight");
  Tensor extra = tensors.at("model.layers.0.self_attn.q_proj.weight");
  extra.name = "model.layers.0.self_attn.rotary.weight";
  tensors[extra.name] = extra;
  tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = extra;  // ignored, as Transformers does
  tensors.at("model.layers.0.mlp.up_proj.weight").shape = {7, 64};
  std::string msg = spark::testing::input_error_of([&] { check_tensor_set(tensors, info.spec, {0, 2}, "folder"); });
  CHECK(msg.find("missing tensors: model.layers.1.self_attn.k_proj.bias, model.norm.weight") != std::string::npos);
  CHECK(msg.find("unexpected tensors: model.layers.0.self_attn.rotary.weight\n") != std::string::npos);
  CHECK(msg.find("wrong shapes: model.layers.0.mlp.up_proj.weight is [7, 64], expected [96, 64]") != std::string::npos);
  CHECK(msg.find("inv_freq") == std::string::npos);
  // A config asking for millions of tensors is refused by count, before listing them.
  ModelSpec huge = info.spec;
  huge.arch = find_hf_architecture("Qwen3MoeForCausalLM");
  huge.num_layers = 1024;
  huge.num_experts = 1024;
  huge.num_experts_per_tok = 8;
  huge.moe_intermediate_size = 64;
  CHECK(expected_tensor_count(huge, full_range(huge)) == 1 + 1024 * (9 + 1 + 3 * 1024) + 2);
  CHECK_INPUT_ERROR(check_tensor_set(info.tensors, huge, {0, 1024}, "folder"), "holds 27 tensors, but");
  for (LayerRange r : {LayerRange{0, 2}, LayerRange{0, 1}, LayerRange{1, 2}})
    CHECK(expected_tensor_count(info.spec, r) == static_cast<int64_t>(expected_tensors(info.spec, r).size()));
  // A stage only misses what it needs: layer 0 alone does not need model.norm.
  tensors = info.tensors;
  tensors.erase("model.norm.weight");
  CHECK_NOTHROW(check_tensor_set(tensors, info.spec, {0, 1}, "folder"));
}

TEST_CASE("weights: dummy weights are deterministic, scaled, and need no weight file") {
  ModelInfo info = inspect(golden_dir() + "/" + golden()["models"][3]["hf_folder"].get<std::string>(), "dummy");
  CHECK(info.format == ModelFormat::DUMMY);
  CHECK(info.tensors.empty());
  ModelSpec s = info.spec;
  Weights a = make_dummy_weights(s, {0, 2}, DType::BF16, 7);
  Weights b = make_dummy_weights(s, {0, 2}, DType::BF16, 7);
  Weights c = make_dummy_weights(s, {0, 2}, DType::BF16, 8);
  auto need = expected_tensors(s, {0, 2});
  REQUIRE(a.all().size() == need.size());
  for (const TensorSpec& ts : need) {
    const Tensor& ta = a.get(ts.name);
    CHECK(ta.shape == ts.shape);
    CHECK(std::memcmp(ta.data, b.get(ts.name).data, ta.nbytes) == 0);
  }
  const Tensor& q = a.get("model.layers.1.self_attn.q_proj.weight");
  CHECK(std::memcmp(q.data, c.get(q.name).data, q.nbytes) != 0);
  // Values are the documented uniform draws, rounded to bf16.
  float limit = std::sqrt(3.0f) / std::sqrt(64.0f);
  std::vector<float> v = to_f32(q);
  double sum2 = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    CHECK(v[i] == bf16_to_f32(f32_to_bf16(dummy_uniform(7, q.name, i, limit))));
    sum2 += double(v[i]) * v[i];
  }
  double std_dev = std::sqrt(sum2 / v.size());
  CHECK(std_dev == doctest::Approx(1.0 / 8.0).epsilon(0.1));  // 1/sqrt(fan_in 64)
  for (float x : to_f32(a.get("model.layers.0.input_layernorm.weight"))) CHECK(x == 1.0f);
  for (float x : to_f32(a.get("model.embed_tokens.weight"))) CHECK(std::fabs(x) <= 0.02f * std::sqrt(3.0f) * 1.01f);
  Weights f = make_dummy_weights(s, {1, 2}, DType::F32, 7);
  CHECK(to_f32(f.get(q.name))[5] == dummy_uniform(7, q.name, 5, limit));
  CHECK(f.find("model.embed_tokens.weight") == nullptr);
  CHECK_INPUT_ERROR(make_dummy_weights(s, {0, 2}, DType::Q4_0), "dummy weights need dtype");
  // Block formats: matrices whose rows are whole blocks are quantized from the same draws;
  // norms stay f32 and other matrices (rows of 64 are no Q4_K block) f16, as GGUF keeps them.
  Weights q8 = make_dummy_weights(s, {0, 2}, DType::Q8_0, 7);
  const Tensor& q8q = q8.get(q.name);
  CHECK(q8q.dtype == DType::Q8_0);
  CHECK(q8q.nbytes == size_t(q8q.numel() / 32 * 34));
  std::vector<float> deq = to_f32(q8q);
  // Half a step, and the step's f16 rounding times up to 127 (llama.cpp's Q8_0 rule).
  for (size_t i = 0; i < deq.size(); ++i)
    REQUIRE(std::fabs(deq[i] - dummy_uniform(7, q.name, i, limit)) <= limit / 127 * 0.563f);
  CHECK(q8.get("model.layers.0.input_layernorm.weight").dtype == DType::F32);
  CHECK(make_dummy_weights(s, {0, 2}, DType::Q4_K, 7).get(q.name).dtype == DType::F16);
  // load_stage_weights with the dummy format builds weights in the checkpoint's dtype.
  Weights d = load_stage_weights(info, {0, 1});
  CHECK(d.get("model.layers.0.self_attn.q_proj.weight").dtype == DType::F16);
  CHECK(stage_weight_bytes(info, {0, 1}) == d.total_bytes());
}

TEST_CASE("weights: FP8 dummy weights are e4m3 with block scales, as an FP8 checkpoint keeps them") {
  ModelSpec s = inspect(golden_dir() + "/" + golden()["models"][3]["hf_folder"].get<std::string>(), "dummy").spec;
  CHECK_INPUT_ERROR(make_dummy_weights(s, {0, 2}, DType::F8_E4M3), "need an FP8 model");
  s.fp8 = true;
  s.fp8_block_rows = 32;
  s.fp8_block_cols = 48;  // rows of 64: a whole block and a partial one
  const Weights w = make_dummy_weights(s, {0, 2}, DType::F8_E4M3, 7);
  const std::string name = "model.layers.1.self_attn.q_proj.weight";
  const Tensor& q = w.get(name);
  REQUIRE(q.dtype == DType::F8_E4M3);
  CHECK((q.scale_block_rows == 32 && q.scale_block_cols == 48));
  const float limit = std::sqrt(3.0f) / std::sqrt(float(q.cols()));
  std::vector<float> row(size_t(q.cols()));
  for (int64_t r = 0; r < q.rows(); ++r) {
    dequantize_tensor_row(q, r, row.data());
    for (int64_t c = 0; c < q.cols(); ++c) {
      const float want = dummy_uniform(7, name, uint64_t(r * q.cols() + c), limit);
      REQUIRE(std::fabs(row[size_t(c)] - want) <= std::fabs(want) / 16 + limit / 448 * std::ldexp(1.0f, -10));
    }
  }
  CHECK(w.get("model.embed_tokens.weight").dtype == DType::BF16);
  CHECK(w.get("model.layers.0.input_layernorm.weight").dtype == DType::F32);
  s.fp8_block_rows = s.fp8_block_cols = 0;  // one scale a row
  const Weights rows = make_dummy_weights(s, {0, 2}, DType::F8_E4M3, 7);
  CHECK((rows.get(name).scale_block_rows == 1 && rows.get(name).scale_block_cols == q.cols()));
}

TEST_CASE("weights: a gpt-oss dummy keeps its experts in MXFP4, and the plan counts its bytes") {
  const ModelInfo info = inspect("tests/golden/models/gpt_oss", "dummy");
  const ModelSpec& s = info.spec;
  REQUIRE(s.mxfp4_experts);
  const Weights w = make_dummy_weights(s, full_range(s), DType::BF16, 7);
  const std::string name = "model.layers.1.mlp.experts.3.down_proj.weight";
  const Tensor& down = w.get(name);
  REQUIRE(down.dtype == DType::MXFP4);
  CHECK(down.nbytes == size_t(down.numel() / 32 * 17));
  // Each value is its draw through quantize_mxfp4: within half of the widest code step
  // (2^(e - 127) between 4 and 6), or the saturation below 8 steps, of the block's scale.
  const float limit = std::sqrt(3.0f) / std::sqrt(float(down.cols()));
  std::vector<float> row(size_t(down.cols()));
  for (int64_t r = 0; r < down.rows(); ++r) {
    dequantize_tensor_row(down, r, row.data());
    for (int64_t b = 0; b < down.cols() / 32; ++b) {
      float amax = 0;
      for (int64_t c = 32 * b; c < 32 * b + 32; ++c)
        amax = std::max(amax, std::fabs(dummy_uniform(7, name, uint64_t(r * down.cols() + c), limit)));
      const float scale = std::exp2(std::floor(std::log2(amax)) - 2);
      for (int64_t c = 32 * b; c < 32 * b + 32; ++c) {
        const float want = dummy_uniform(7, name, uint64_t(r * down.cols() + c), limit);
        REQUIRE(std::fabs(row[size_t(c)] - want) <= std::max(scale, std::fabs(want) - 6 * scale));
      }
    }
  }
  CHECK(w.get("model.layers.0.mlp.gate.weight").dtype == DType::BF16);
  CHECK(w.get("model.layers.0.self_attn.sinks").dtype == DType::BF16);
  CHECK(w.get("model.layers.0.mlp.experts.0.gate_proj.weight").dtype == DType::MXFP4);
  // The plans count the same bytes (dummy_weight_bytes, through stage_weight_bytes), and
  // the tiny config's f32 model stores the rest in f32.
  CHECK(dummy_weight_bytes(s, full_range(s), DType::BF16) == w.total_bytes());
  const Weights loaded = load_stage_weights(info, full_range(s));
  CHECK(loaded.get("model.layers.0.mlp.gate.weight").dtype == DType::F32);
  CHECK(loaded.get(name).dtype == DType::MXFP4);
  CHECK(stage_weight_bytes(info, full_range(s)) == loaded.total_bytes());
}

TEST_CASE("model loader: paths and formats are checked") {
  CHECK_INPUT_ERROR(inspect(""), "model.path is not set");
  CHECK_INPUT_ERROR(inspect("/nonexistent/model.gguf"), "does not exist");
  CHECK_INPUT_ERROR(inspect("tests/unit/main.cpp"), "is a file but not a .gguf");
  CHECK_INPUT_ERROR(inspect(golden_dir() + "/llama.gguf", "pt"), "load_format");
  CHECK(inspect("tests/golden/configs/llama3_8b", "dummy").spec.num_layers == 32);
  CHECK(inspect("tests/golden/configs/llama3_8b/config.json", "dummy").spec.num_layers == 32);
  CHECK_INPUT_ERROR(inspect("tests/golden/configs/llama3_8b"), "has neither model.safetensors");
  Config c = config_for_model(golden_dir() + "/llama.gguf");
  c.model.tokenizer = "/tok";
  c.model.chat_template = "/t.jinja";
  ModelInfo info = inspect_model(c);
  CHECK(info.tokenizer_path == "/tok");
  CHECK(info.chat_template_path == "/t.jinja");
  CHECK(inspect(golden_dir() + "/llama.gguf").tokenizer_path == golden_dir() + "/llama.gguf");
}

TEST_CASE("mmap: empty files, folders and missing files") {
  std::string p = (std::filesystem::temp_directory_path() / ("sparkd_empty_" + std::to_string(::getpid()))).string();
  { std::ofstream(p).flush(); }
  auto m = MappedFile::open(p);
  CHECK(m->size() == 0);
  CHECK(m->data() == nullptr);
  m->prefetch(0, 100);  // harmless on an empty mapping
  std::filesystem::remove(p);
  CHECK_INPUT_ERROR(MappedFile::open("/nonexistent-file"), "cannot open '/nonexistent-file'");
  CHECK_INPUT_ERROR(MappedFile::open("/tmp"), "is not a regular file");
  CHECK_INPUT_ERROR(GgufFile::open("/tmp"), "is not a regular file");
}
