// test_layer_shape.cpp — the per-layer description the backends build their layers from,
// and the refusal by name of a case a backend lacks.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/model/layer_shape.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;

namespace {

ModelSpec spec_of(const std::string& json) { return parse_hf_config(json, "", "config.json"); }

const std::string kQwen3 = R"({"architectures":["Qwen3ForCausalLM"],"vocab_size":100,"hidden_size":64,)"
                           R"("intermediate_size":96,"num_hidden_layers":3,"num_attention_heads":4,)"
                           R"("num_key_value_heads":2,"head_dim":32,"rope_theta":1000000})";
const std::string kGptOss = R"({"architectures":["GptOssForCausalLM"],"vocab_size":100,"hidden_size":64,)"
                            R"("intermediate_size":64,"num_hidden_layers":4,"num_attention_heads":4,)"
                            R"("num_key_value_heads":2,"head_dim":16,"num_local_experts":4,)"
                            R"("num_experts_per_tok":2,"sliding_window":8,"swiglu_limit":5.0,)"
                            R"("layer_types":["sliding_attention","full_attention","full_attention","sliding_attention"]})";

}  // namespace

TEST_CASE("layer shapes: a dense model's layers are alike, scaled by 1/sqrt(head_dim)") {
  ModelSpec s = spec_of(kQwen3);
  std::vector<LayerShape> layers = layer_shapes(s, {1, 3});
  REQUIRE(layers.size() == 2);
  for (const LayerShape& l : layers) {
    CHECK(l.mixer == Mixer::ATTENTION);
    CHECK(l.num_heads == 4);
    CHECK(l.head_dim == 32);
    CHECK(l.attention_scale == doctest::Approx(1.0 / std::sqrt(32.0)));
    CHECK(l.qk_norm);
    CHECK(l.window == 0);
    CHECK(l.rope_theta == 1000000);
    CHECK(l.rotary_dim == 32);
    CHECK(!l.moe);
    CHECK(l.activation == Activation::SILU);
    CHECK(l.kv_values_per_token() == 2 * 2 * 32);
  }
  CHECK(layers[0].layer == 1);
  CHECK(layers[1].layer == 2);
  CHECK_NOTHROW(require_cases(layers, s, LayerCases{.backend = "the CPU backend"}));
  CHECK_INPUT_ERROR(layer_shapes(s, {2, 4}), "not inside the model's 3 layers");
}

TEST_CASE("layer shapes: gpt-oss's windows follow layer_types, its experts the clamped SwiGLU") {
  ModelSpec s = spec_of(kGptOss);
  std::vector<LayerShape> layers = layer_shapes(s, {0, 4});
  std::vector<int64_t> windows;
  for (const LayerShape& l : layers) windows.push_back(l.window);
  CHECK(windows == std::vector<int64_t>{8, 0, 0, 8});
  for (const LayerShape& l : layers) {
    CHECK(l.moe);
    CHECK(l.sinks);
    CHECK(l.activation == Activation::CLAMPED_SWIGLU);
    CHECK(l.swiglu_limit == 5.0f);
    CHECK(l.softmax_after_topk);
  }
}

TEST_CASE("layer shapes: a case the backend lacks is refused with the layer and its name") {
  ModelSpec s = spec_of(kQwen3);
  const LayerCases cpu{.backend = "the CPU backend"};
  auto with = [&](auto change) {
    std::vector<LayerShape> layers = layer_shapes(s, {0, 3});
    change(layers[2]);
    return layers;
  };
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.norm_placement = NormPlacement::SANDWICH; }), s, cpu),
                    "the CPU backend has no case for layer 2's norm placement 'sandwich'");
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.norm_kind = NormKind::RMS_PLUS_ONE; }), s, cpu),
                    "layer 2's norm kind 'rms (1 + w)'");
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.activation = Activation::GELU_TANH; }), s, cpu),
                    "layer 2's activation 'gelu (tanh)'");
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.mixer = Mixer::RECURRENT; }), s, cpu),
                    "layer 2's token mixer 'gated deltanet'");
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.head_dim = 64; }), s, cpu),
                    "layer 2's own attention geometry (the model's: 4 heads, 2 kv heads, head_dim 32)");
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.rope_theta = 10000; }), s, cpu),
                    "layer 2's own RoPE (base 10000, no scaling; the model's: base 1e+06, no scaling)");
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.rope_scaling.type = "linear"; }), s, cpu),
                    "layer 2's own RoPE (base 1e+06, linear scaling; the model's: base 1e+06, no scaling)");
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.rotary_dim = 16; }), s, cpu),
                    "layer 2's partial rotary embedding (16 of 32 dimensions)");
  CHECK_INPUT_ERROR(require_cases(with([](LayerShape& l) { l.attention_scale = 1.0; }), s, cpu),
                    "layer 2's attention scale other than 1/sqrt(head_dim)");
  // A backend that lists the case accepts it.
  LayerCases more = cpu;
  more.norm_placements.push_back(NormPlacement::SANDWICH);
  CHECK_NOTHROW(require_cases(with([](LayerShape& l) { l.norm_placement = NormPlacement::SANDWICH; }), s, more));
}
