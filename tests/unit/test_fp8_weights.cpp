// test_fp8_weights.cpp — FP8 checkpoints: quantization_config parsing, e4m3 decoding, and
// the scale tensors beside each weight (fp8_weights.h), hostile ones included: each gives
// an InputError naming the tensor. Logits of whole FP8 models: test_cpu_forward.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/model/fp8_weights.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_spec.h"
#include "engine/model/quant.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::input_error_of;

namespace {

std::string config(const std::string& quant) {
  return R"({"architectures":["LlamaForCausalLM"],"vocab_size":100,"hidden_size":256,"intermediate_size":320,)"
         R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"quantization_config":)" +
         quant + "}";
}

// A [300, 256] e4m3 weight and its scale tensor of `shape` (f32, all `value`).
struct Fixture {
  std::vector<uint8_t> q = std::vector<uint8_t>(300 * 256, 0x38);  // 1.0
  std::vector<float> s;
  std::map<std::string, Tensor> found;
  Tensor weight() const { return found.at("w.weight"); }
  Fixture(const std::string& scale_name, std::vector<int64_t> shape, float value) {
    Tensor w{"w.weight", DType::F8_E4M3, {300, 256}, q.data(), q.size()};
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    s.assign(size_t(n), value);
    found["w.weight"] = w;
    found[scale_name] = Tensor{scale_name, DType::F32, shape, s.data(), s.size() * 4};
  }
};

}  // namespace

TEST_CASE("fp8: quantization_config is parsed, and what sparkd cannot run is refused") {
  const ModelSpec block = parse_hf_config(config(R"({"quant_method":"fp8","weight_block_size":[128,128]})"), "", "c");
  CHECK(block.fp8);
  CHECK(block.fp8_block_rows == 128);
  CHECK(block.fp8_block_cols == 128);
  const ModelSpec channel = parse_hf_config(config(R"({"quant_method":"fp8","activation_scheme":"dynamic"})"), "", "c");
  CHECK(channel.fp8);
  CHECK(channel.fp8_block_rows == 0);
  CHECK(input_error_of([] { parse_hf_config(config(R"({"quant_method":"awq"})"), "", "c"); })
            .find("quant_method \"awq\" is not supported") != std::string::npos);
  CHECK(input_error_of([] { parse_hf_config(config(R"({"quant_method":"fp8","activation_scheme":"static"})"), "", "c"); })
            .find("activation_scheme") != std::string::npos);
  CHECK(input_error_of([] { parse_hf_config(config(R"({"quant_method":"fp8","weight_block_size":[128]})"), "", "c"); })
            .find("weight_block_size") != std::string::npos);
}

TEST_CASE("fp8: e4m3 decodes exactly") {
  CHECK(fp8_e4m3_to_f32(0x00) == 0.0f);
  CHECK(fp8_e4m3_to_f32(0x38) == 1.0f);
  CHECK(fp8_e4m3_to_f32(0x7E) == 448.0f);
  CHECK(fp8_e4m3_to_f32(0xFE) == -448.0f);
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(fp8_e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(std::isnan(fp8_e4m3_to_f32(0x7F)));
  CHECK(std::isnan(fp8_e4m3_to_f32(0xFF)));
}

TEST_CASE("fp8: block, channel and tensor scales attach; a row dequantizes to e4m3 x its scale") {
  const ModelSpec block = parse_hf_config(config(R"({"quant_method":"fp8","weight_block_size":[128,128]})"), "", "c");
  const ModelSpec plain = parse_hf_config(config(R"({"quant_method":"fp8"})"), "", "c");
  Weights keep;
  {
    Fixture f("w.weight_scale_inv", {3, 2}, 0.5f);  // 300 rows: 3 row blocks, the last partial
    f.s[5] = 2.0f;                                   // row block 2, column block 1
    Tensor t = f.weight();
    attach_fp8_scales(f.found, block, t, keep, "m");
    std::vector<float> row(256);
    dequantize_tensor_row(t, 299, row.data());
    CHECK(row[0] == 0.5f);
    CHECK(row[255] == 2.0f);
  }
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{300, 1}, {300}, {1}, {}}) {
    Fixture f("w.weight_scale", shape, 0.25f);
    Tensor t = f.weight();
    attach_fp8_scales(f.found, plain, t, keep, "m");
    std::vector<float> row(256);
    dequantize_tensor_row(t, 7, row.data());
    CHECK(row[100] == 0.25f);
  }
}

TEST_CASE("fp8: hostile scales are refused naming the tensor") {
  const ModelSpec block = parse_hf_config(config(R"({"quant_method":"fp8","weight_block_size":[128,128]})"), "", "c");
  const ModelSpec plain = parse_hf_config(config(R"({"quant_method":"fp8"})"), "", "c");
  const ModelSpec none = parse_hf_config(R"({"architectures":["LlamaForCausalLM"],"vocab_size":100,"hidden_size":256,)"
                                         R"("intermediate_size":320,"num_hidden_layers":2,"num_attention_heads":4})",
                                         "", "c");
  Weights keep;
  auto error = [&](Fixture& f, const ModelSpec& spec) {
    Tensor t = f.weight();
    return input_error_of([&] { attach_fp8_scales(f.found, spec, t, keep, "m"); });
  };
  Fixture wrong_grid("w.weight_scale_inv", {2, 2}, 1.0f);
  CHECK(error(wrong_grid, block).find("'w.weight_scale_inv' is [2, 2]") != std::string::npos);
  Fixture wrong_channel("w.weight_scale", {256, 1}, 1.0f);
  CHECK(error(wrong_channel, plain).find("'w.weight_scale' is [256, 1]") != std::string::npos);
  Fixture missing("w.weight_scale", {3, 2}, 1.0f);
  CHECK(error(missing, block).find("no scale tensor 'w.weight_scale_inv'") != std::string::npos);
  Fixture nan("w.weight_scale_inv", {3, 2}, std::numeric_limits<float>::quiet_NaN());
  CHECK(error(nan, block).find("'w.weight_scale_inv' holds") != std::string::npos);
  Fixture inf("w.weight_scale", {300, 1}, std::numeric_limits<float>::infinity());
  CHECK(error(inf, plain).find("finite and positive") != std::string::npos);
  Fixture negative("w.weight_scale", {1}, -1.0f);
  CHECK(error(negative, plain).find("finite and positive") != std::string::npos);
  Fixture unannounced("w.weight_scale", {1}, 1.0f);
  CHECK(error(unannounced, none).find("FP8 weight 'w.weight' is e4m3, but config.json has no quantization_config") !=
        std::string::npos);
}
