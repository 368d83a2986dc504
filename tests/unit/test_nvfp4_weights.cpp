// test_nvfp4_weights.cpp — ModelOpt checkpoints: the quantization config (config.json's
// quantization_config or hf_quant_config.json), and NVFP4 weights repacked from ModelOpt's
// layout into GGUF's blocks, read back against a decoder of ModelOpt's own layout written
// here; hostile scales refused naming the tensor. Whole models: tests/integration/test_modelopt.py.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/model/fp8_weights.h"
#include "engine/model/model_spec.h"
#include "engine/model/nvfp4_weights.h"
#include "engine/model/quant.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::input_error_of;

namespace {

std::string config(const std::string& quant) {
  return R"({"architectures":["LlamaForCausalLM"],"vocab_size":100,"hidden_size":256,"intermediate_size":320,)"
         R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2)" +
         (quant.empty() ? std::string() : R"(,"quantization_config":)" + quant) + "}";
}

constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// A ModelOpt NVFP4 weight `w` of [rows, cols] values with random codes and scales.
struct ModelOptWeight {
  int64_t rows, cols;
  std::vector<uint8_t> codes, scales;
  float global = 0.0123f;
  std::map<std::string, Tensor> found;

  ModelOptWeight(int64_t r, int64_t c) : rows(r), cols(c), codes(size_t(r * c / 2)), scales(size_t(r * c / 16)) {
    std::mt19937 rng(7);
    for (auto& b : codes) b = uint8_t(rng());
    for (auto& s : scales) s = uint8_t(rng() % 0x7F);  // positive, not NaN
    found["w.weight"] = Tensor{"w.weight", DType::U8, {rows, cols / 2}, codes.data(), codes.size()};
    found["w.weight_scale"] =
        Tensor{"w.weight_scale", DType::F8_E4M3, {rows, cols / 16}, scales.data(), scales.size()};
    found["w.weight_scale_2"] = Tensor{"w.weight_scale_2", DType::F32, {}, &global, 4};
  }
  // Value (r, c) as ModelOpt defines it: e2m1(code) * e4m3(block scale) * weight_scale_2.
  float value(int64_t r, int64_t c) const {
    const uint8_t byte = codes[size_t(r * cols / 2 + c / 2)];
    const int code = (c % 2 == 0) ? byte & 0x0F : byte >> 4;
    const float v = (code & 8) ? -kE2m1[code & 7] : kE2m1[code & 7];
    return v * fp8_e4m3_to_f32(scales[size_t(r * cols / 16 + c / 16)]) * global;
  }
};

Tensor repacked(ModelOptWeight& m, Weights& w) {
  const std::map<std::string, Tensor> view = nvfp4_header_view(m.found, "t");
  return nvfp4_from_modelopt(view, view.at("w.weight"), w, "t");
}

}  // namespace

TEST_CASE("modelopt: quant_algo, MIXED_PRECISION maps and hf_quant_config.json are parsed; the rest refused") {
  const ModelSpec nv = parse_hf_config(config(R"({"quant_method":"modelopt","quant_algo":"NVFP4","group_size":16,)"
                                              R"("kv_cache_quant_algo":"FP8","exclude_modules":["lm_head"]})"),
                                       "", "c");
  CHECK((nv.modelopt && nv.nvfp4 && !nv.fp8 && nv.kv_cache_fp8));
  const ModelSpec fp8 = parse_hf_config(config(R"({"quant_method":"modelopt","quant_algo":"FP8"})"), "", "c");
  CHECK((fp8.modelopt && fp8.fp8 && !fp8.nvfp4 && fp8.fp8_block_rows == 0 && !fp8.kv_cache_fp8));
  // The checkpoint's FP8 KV cache is what "auto" gives it; "fp8" is FP8 for every model.
  Config c;
  CHECK(fp8_kv_cache(c, nv));
  CHECK_FALSE(fp8_kv_cache(c, fp8));
  c.engine.kv_cache_dtype = "fp8";
  CHECK(fp8_kv_cache(c, fp8));
  const ModelSpec mixed = parse_hf_config(
      config(R"({"quant_method":"modelopt","quant_algo":"MIXED_PRECISION","quantized_layers":{)"
             R"("model.layers.0.self_attn.q_proj":{"quant_algo":"FP8"},)"
             R"("model.layers.0.mlp.down_proj":{"quant_algo":"W4A16_NVFP4","group_size":16}}})"),
      "", "c");
  CHECK((mixed.fp8 && mixed.nvfp4 && mixed.modelopt_layers.size() == 2));
  CHECK(mixed.modelopt_layers.at("model.layers.0.mlp.down_proj") == "W4A16_NVFP4");
  // An export that keeps it all in hf_quant_config.json, or names only the method in config.json.
  const std::string hf_quant = R"({"producer":{"name":"modelopt"},"quantization":{"quant_algo":"W4A16_NVFP4"}})";
  CHECK(parse_hf_config(config(""), "", "c", hf_quant).nvfp4);
  CHECK(parse_hf_config(config(R"({"quant_method":"modelopt"})"), "", "c", hf_quant).nvfp4);

  CHECK(input_error_of([] {
          parse_hf_config(config(R"({"quant_method":"modelopt","quant_algo":"W4A8_AWQ"})"), "", "c");
        }).find("\"W4A8_AWQ\" is not supported") != std::string::npos);
  CHECK(input_error_of([] {
          parse_hf_config(config(R"({"quant_method":"modelopt","quant_algo":"NVFP4","group_size":32})"), "", "c");
        }).find("group_size") != std::string::npos);
  CHECK(input_error_of([] {
          parse_hf_config(config(R"({"quant_method":"modelopt","quant_algo":"FP8","kv_cache_quant_algo":"INT8"})"),
                          "", "c");
        }).find("kv_cache_quant_algo") != std::string::npos);
  CHECK(input_error_of([] {
          parse_hf_config(config(R"({"quant_method":"modelopt","quant_algo":"MIXED_PRECISION"})"), "", "c");
        }).find("quantized_layers") != std::string::npos);
  CHECK(input_error_of([] {
          parse_hf_config(config(R"({"quant_method":"modelopt","quant_algo":"MIXED_PRECISION","quantized_layers":)"
                                 R"({"model.layers.0.mlp.up_proj":{"quant_algo":"INT4_AWQ"}}})"),
                          "", "c");
        }).find("quantized_layers.model.layers.0.mlp.up_proj.quant_algo \"INT4_AWQ\"") != std::string::npos);
  CHECK(input_error_of([] { parse_hf_config(config(""), "", "c", R"({"producer":{}})"); })
            .find("hf_quant_config.json") != std::string::npos);
}

TEST_CASE("modelopt: NVFP4 weights repack losslessly into GGUF's blocks, the global scale on the tensor") {
  ModelOptWeight m(5, 192);
  Weights w;
  const Tensor t = repacked(m, w);
  CHECK(t.dtype == DType::NVFP4);
  CHECK(t.shape == std::vector<int64_t>{5, 192});
  CHECK(t.nbytes == size_t(5 * 3 * 36));
  CHECK(t.modelopt_block_scales != nullptr);  // as the file holds it, until read
  // The values as ModelOpt defines them: read as the file holds them (a row repacked at a
  // time), and after the CPU backend's load repacks the whole tensor into GGUF's blocks.
  auto exact_values = [&](const Tensor& x) {
    std::vector<float> row(192);
    int64_t exact = 0;
    for (int64_t r = 0; r < 5; ++r) {
      dequantize_tensor_row(x, r, row.data());
      for (int64_t c = 0; c < 192; ++c) exact += row[size_t(c)] == m.value(r, c);
    }
    return exact;
  };
  CHECK(exact_values(t) == 5 * 192);
  w.add(t);
  materialize_nvfp4(w);
  const Tensor& blocks = w.get("w.weight");
  CHECK(blocks.modelopt_block_scales == nullptr);
  CHECK(blocks.data != t.data);
  CHECK(exact_values(blocks) == 5 * 192);
}

TEST_CASE("modelopt: hostile NVFP4 scales and shapes are refused naming the tensor") {
  SUBCASE("a NaN block scale") {
    ModelOptWeight m(4, 64);
    m.scales[9] = 0x7F;
    Weights w;
    CHECK(input_error_of([&] { repacked(m, w); }).find("'w.weight_scale' holds a NaN E4M3 scale at element 9") !=
          std::string::npos);
  }
  SUBCASE("a negative block scale") {
    ModelOptWeight m(4, 64);
    m.scales[3] = 0xB8;
    Weights w;
    CHECK(input_error_of([&] { repacked(m, w); }).find("negative") != std::string::npos);
  }
  SUBCASE("block scales of the wrong shape") {
    ModelOptWeight m(4, 64);
    m.found["w.weight_scale"].shape = {4, 2};
    CHECK(input_error_of([&] { nvfp4_header_view(m.found, "t"); }).find("must be F8_E4M3 of shape [4, 4]") !=
          std::string::npos);
  }
  SUBCASE("rows that are not whole 64-value blocks") {
    ModelOptWeight m(4, 64);
    m.found["w.weight"].shape = {8, 16};
    CHECK(input_error_of([&] { nvfp4_header_view(m.found, "t"); }).find("multiple of 64") != std::string::npos);
  }
  SUBCASE("a global scale that is zero, or missing") {
    ModelOptWeight m(4, 64);
    m.global = 0.0f;
    Weights w;
    CHECK(input_error_of([&] { repacked(m, w); }).find("'w.weight_scale_2' holds 0") != std::string::npos);
    m.found.erase("w.weight_scale_2");
    CHECK(input_error_of([&] { nvfp4_header_view(m.found, "t"); }).find("no scale tensor 'w.weight_scale_2'") !=
          std::string::npos);
  }
}
