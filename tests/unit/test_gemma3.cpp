// test_gemma3.cpp — Gemma 3's config as transformers reads it (both RoPE forms, the multimodal
// text_config and its defaults), its layers' description, the refusal of what a backend
// lacks, and the checkpoint names it reads. Its logits: test_cpu_forward.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/model/arch.h"
#include "engine/model/architecture.h"
#include "engine/model/layer_shape.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using nlohmann::json;

namespace {

// The tiny model of tests/gen/gen_gemma3.py, as transformers 5 wrote its config.
json golden_config() {
  std::ifstream in("tests/golden/models/gemma3/config.json");
  REQUIRE(in.good());
  return json::parse(in);
}

ModelSpec parse(const json& config) { return parse_hf_config(config.dump(), "", "config.json"); }

// The configs published before transformers 5: RoPE in rope_theta, rope_scaling and
// rope_local_base_freq, the layer pattern in sliding_window_pattern.
json old_form() {
  json c = golden_config();
  c.erase("rope_parameters");
  c.erase("layer_types");
  c["rope_theta"] = 1000000.0;
  c["rope_local_base_freq"] = 10000.0;
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  c["sliding_window_pattern"] = 2;
  return c;
}

// A backend with every case but Gemma's (the CUDA backend's today).
LayerCases cases_without_gemma() {
  return LayerCases{.backend = "a backend",
                    .mixers = {Mixer::ATTENTION, Mixer::RECURRENT, Mixer::MAMBA2, Mixer::NONE},
                    .norm_placements = {NormPlacement::PRE, NormPlacement::POST},
                    .norm_kinds = {NormKind::RMS, NormKind::RMS_PLUS_ONE, NormKind::LAYER},
                    .activations = {Activation::SILU, Activation::CLAMPED_SWIGLU, Activation::RELU2, Activation::GELU},
                    .partial_rotary = true,
                    .output_gate = true,
                    .shared_expert = true,
                    .no_rope = true,
                    .ffn_less_layers = true,
                    .sigmoid_router = true,
                    .bidirectional = true};
}

// The same with Gemma 3's (the CPU backend's).
LayerCases cases_with_gemma() {
  LayerCases c = cases_without_gemma();
  c.norm_placements.push_back(NormPlacement::SANDWICH);
  c.activations.push_back(Activation::GELU_TANH);
  c.per_layer_rope = c.custom_attention_scale = c.embedding_scale = c.logit_softcap = true;
  return c;
}

}  // namespace

TEST_CASE("gemma3 spec: the tiny model's config as transformers 5 writes it") {
  const ModelSpec s = parse(golden_config());
  CHECK(s.arch == find_hf_architecture("Gemma3ForCausalLM"));
  CHECK(s.norm_plus_one);
  CHECK(s.sandwich_norms);
  CHECK(s.gelu_tanh_mlp);
  CHECK(s.qk_norm);
  CHECK(s.scale_embedding);
  CHECK(s.tie_word_embeddings);
  CHECK(s.query_pre_attn_scalar == 24);
  CHECK(s.final_logit_softcap == 0);
  CHECK(s.sliding_window == 8);
  CHECK(s.layer_sliding == std::vector<uint8_t>{1, 0, 1, 1});
  CHECK(s.rope_theta == 100000);
  CHECK(s.rope_scaling.type == "linear");
  CHECK(s.rope_scaling.factor == 2.0);
  CHECK(s.sliding_rope);
  CHECK(s.sliding_rope_theta == 10000);
  CHECK(s.sliding_rope_scaling.type.empty());
  CHECK(s.eos_token_ids == std::vector<int32_t>{1});
}

TEST_CASE("gemma3 spec: the older RoPE keys, sliding_window_pattern, and the softcap") {
  json c = old_form();
  c["final_logit_softcapping"] = 30.0;
  const ModelSpec s = parse(c);
  CHECK(s.rope_theta == 1000000);
  CHECK(s.rope_scaling.type == "linear");
  CHECK(s.rope_scaling.factor == 8.0);
  CHECK(s.sliding_rope_theta == 10000);
  CHECK(s.sliding_rope_scaling.type.empty());
  // transformers' default: every sliding_window_pattern-th layer is full.
  CHECK(s.layer_sliding == std::vector<uint8_t>{1, 0, 1, 0});
  CHECK(s.final_logit_softcap == 30.0);
  c.erase("sliding_window_pattern");  // 6 by default: all four layers slide
  CHECK(parse(c).layer_sliding == std::vector<uint8_t>{1, 1, 1, 1});
  c.erase("rope_local_base_freq");
  c.erase("rope_theta");
  const ModelSpec d = parse(c);
  CHECK(d.rope_theta == 1e6);  // transformers' defaults by layer type
  CHECK(d.sliding_rope_theta == 1e4);
}

TEST_CASE("gemma3 spec: Gemma3ForConditionalGeneration's text_config, with transformers' defaults for what it leaves out") {
  // As the published 4B config: text_config names only what differs from Gemma3TextConfig.
  const json c = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                  {"torch_dtype", "bfloat16"},
                  {"eos_token_id", {1, 106}},
                  {"text_config",
                   {{"hidden_size", 2560}, {"intermediate_size", 10240}, {"model_type", "gemma3_text"},
                    {"num_hidden_layers", 34}, {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                    {"sliding_window", 1024}}},
                  {"vision_config", {{"hidden_size", 1152}}}};
  const ModelSpec s = parse(c);
  CHECK(s.arch == find_hf_architecture("Gemma3ForConditionalGeneration"));
  CHECK(s.vocab_size == 262208);
  CHECK(s.hidden_size == 2560);
  CHECK(s.num_layers == 34);
  CHECK(s.num_heads == 8);
  CHECK(s.num_kv_heads == 4);
  CHECK(s.head_dim == 256);
  CHECK(s.query_pre_attn_scalar == 256);
  CHECK(s.tie_word_embeddings);
  CHECK(s.sliding_window == 1024);
  CHECK(s.max_position_embeddings == 131072);
  CHECK(s.rope_theta == 1e6);
  CHECK(s.rope_scaling.factor == 8.0);
  CHECK(s.sliding_rope_theta == 1e4);
  CHECK(s.eos_token_ids == std::vector<int32_t>{1, 106});
  int sliding = 0;
  for (uint8_t x : s.layer_sliding) sliding += x;
  CHECK(sliding == 34 - 5);  // layers 5, 11, 17, 23 and 29 are full
  CHECK(!s.layer_is_sliding(5));
  CHECK(s.layer_is_sliding(6));
}

TEST_CASE("gemma3 spec: bad keys are refused by name") {
  auto with = [](auto edit) {
    json c = golden_config();
    edit(c);
    return c.dump();
  };
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["layer_types"][2] = "chunked_attention"; }), "", "c"),
                    "\"layer_types\" [2] = \"chunked_attention\" is not one of sliding_attention, full_attention");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["layer_types"].erase(0); }), "", "c"),
                    "\"layer_types\" must list one type per layer (4)");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["attn_logit_softcapping"] = 50.0; }), "", "c"),
                    "\"attn_logit_softcapping\" = 50.0 is not supported");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["final_logit_softcapping"] = -1.0; }), "", "c"),
                    "\"final_logit_softcapping\" must be positive or null");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["query_pre_attn_scalar"] = 0; }), "", "c"),
                    "\"query_pre_attn_scalar\" must be positive");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["hidden_activation"] = "gelu"; }), "", "c"),
                    "\"hidden_activation\" = \"gelu\" is not supported");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["use_bidirectional_attention"] = true; }), "", "c"),
                    "\"use_bidirectional_attention\" = true");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["rope_parameters"]["full_attention"]["rope_type"] = "dynamic"; }), "", "c"),
                    "rope scaling type \"dynamic\" is not supported");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["rope_parameters"]["sliding_attention"]["rope_theta"] = -1.0; }), "", "c"),
                    "(rope_parameters.sliding_attention): \"rope_theta\" must be positive");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["rope_parameters"]["full_attention"] = 3; }), "", "c"),
                    "\"rope_parameters.full_attention\" must be an object");
  CHECK_INPUT_ERROR(parse_hf_config(with([](json& c) { c["attention_bias"] = true; }), "", "c"),
                    "\"attention_bias\" = true is not supported");
}

TEST_CASE("gemma3 layer shapes: sandwich (1 + w) norms, GELU-tanh, the query scale and a RoPE per layer type") {
  const ModelSpec s = parse(golden_config());
  const std::vector<LayerShape> layers = layer_shapes(s, {0, 4});
  for (const LayerShape& l : layers) {
    CAPTURE(l.layer);
    CHECK(l.norm_placement == NormPlacement::SANDWICH);
    CHECK(l.norm_kind == NormKind::RMS_PLUS_ONE);
    CHECK(l.activation == Activation::GELU_TANH);
    CHECK(l.attention_scale == doctest::Approx(1.0 / std::sqrt(24.0)));
    CHECK(l.qk_norm);
    const bool sliding = l.layer != 1;
    CHECK(l.window == (sliding ? 8 : 0));
    CHECK(l.rope_theta == (sliding ? 10000 : 100000));
    CHECK(l.rope_scaling.type == (sliding ? "" : "linear"));
  }
  // Four norms a layer: the sandwich parts beside ATTN_NORM and FFN_NORM.
  std::vector<Part> norms;
  for (const PartSpec& p : layer_parts(s, 0))
    if (part_is_norm(p.part) && p.part != Part::Q_NORM && p.part != Part::K_NORM) norms.push_back(p.part);
  CHECK(norms == std::vector<Part>{Part::ATTN_NORM, Part::POST_ATTN_NORM, Part::FFN_NORM, Part::POST_FFN_NORM});
  CHECK_NOTHROW(require_cases(layers, s, cases_with_gemma()));
}

TEST_CASE("gemma3 layer shapes: a backend without Gemma's cases refuses it by name") {
  const ModelSpec s = parse(golden_config());
  const std::vector<LayerShape> layers = layer_shapes(s, {0, 4});
  CHECK_INPUT_ERROR(require_cases(layers, s, cases_without_gemma()),
                    "a backend has no case for layer 0's norm placement 'sandwich'");
  LayerCases c = cases_with_gemma();
  c.activations.pop_back();
  CHECK_INPUT_ERROR(require_cases(layers, s, c), "has no case for layer 0's activation 'gelu (tanh)'");
  c = cases_with_gemma();
  c.per_layer_rope = false;
  CHECK_INPUT_ERROR(require_cases(layers, s, c), "has no case for layer 0's own RoPE (base 10000, no scaling; the model's: base 100000, linear scaling)");
  c = cases_with_gemma();
  c.custom_attention_scale = false;
  CHECK_INPUT_ERROR(require_cases(layers, s, c), "has no case for layer 0's attention scale other than 1/sqrt(head_dim)");
  c = cases_with_gemma();
  c.embedding_scale = false;
  CHECK_INPUT_ERROR(require_cases(layers, s, c), "no case for the model's embedding scaled by sqrt(hidden_size)");
  json capped = golden_config();
  capped["final_logit_softcapping"] = 30.0;
  const ModelSpec sc = parse(capped);
  c = cases_with_gemma();
  c.logit_softcap = false;
  CHECK_INPUT_ERROR(require_cases(layer_shapes(sc, {0, 4}), sc, c), "no case for the model's final logit softcapping");
  // Per-layer RoPE is not per-layer geometry: a backend may have one without the other.
  c = cases_with_gemma();
  c.per_layer_geometry = false;
  CHECK_NOTHROW(require_cases(layers, s, c));
}

TEST_CASE("gemma3 checkpoint names: Gemma's four norms, the multimodal prefixes, the vision tower skipped") {
  const ModelSpec s = parse(golden_config());
  const Architecture& arch = *s.arch;
  REQUIRE(static_cast<bool>(arch.convert_checkpoint));
  std::map<std::string, Tensor> file;
  for (const char* name : {"model.language_model.layers.3.post_attention_layernorm.weight",
                           "model.language_model.layers.3.pre_feedforward_layernorm.weight",
                           "model.language_model.layers.3.post_feedforward_layernorm.weight",
                           "model.language_model.layers.3.input_layernorm.weight",
                           "language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
                           "model.vision_tower.vision_model.embeddings.patch_embedding.weight",
                           "multi_modal_projector.mm_soft_emb_norm.weight", "model.layers.x.post_attention_layernorm.weight"})
    file[name].name = name;
  const std::map<std::string, Tensor> out = arch.convert_checkpoint(file, s, {0, 4}, nullptr, "test");
  std::vector<std::string> names;
  for (const auto& [name, t] : out) names.push_back(name);
  std::vector<std::string> want = {tensor_name(Part::POST_ATTN_NORM, 3), tensor_name(Part::FFN_NORM, 3),
                                   tensor_name(Part::POST_FFN_NORM, 3), tensor_name(Part::ATTN_NORM, 3),
                                   tensor_name(Part::EMBEDDING), tensor_name(Part::LM_HEAD),
                                   "model.layers.x.post_attention_layernorm.weight"};  // no layer: left for the loader to name
  std::sort(want.begin(), want.end());
  CHECK(names == want);
  // Two file tensors that land on one name are refused.
  file["model.layers.3.input_layernorm.weight"].name = "model.layers.3.input_layernorm.weight";
  CHECK_INPUT_ERROR(arch.convert_checkpoint(file, s, {0, 4}, nullptr, "test"), "is stored twice");
}
