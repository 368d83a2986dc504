// test_gemma4.cpp — Gemma 4's config as transformers reads it (the full layers' own geometry,
// K = V, proportional RoPE, the MoE block), its layers' description and KV sizes per layer,
// the refusal of what a backend lacks, and hostile files. Its logits: test_cpu_forward.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/ops.h"
#include "engine/config.h"
#include "engine/model/arch.h"
#include "engine/model/architecture.h"
#include "engine/model/layer_shape.h"
#include "engine/model/dummy.h"
#include "engine/model/model_loader.h"
#include "engine/model/stage_weights.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// The tiny models of tests/gen/gen_gemma4.py, as transformers 5 wrote their configs.
json golden_config(const std::string& name) {
  std::ifstream in("tests/golden/models/" + name + "/config.json");
  REQUIRE(in.good());
  return json::parse(in);
}

ModelSpec parse(const json& config) { return parse_hf_config(config.dump(), "", "config.json"); }

// A copy of a golden model's folder with its config edited: what the loader reads.
struct EditedModel {
  fs::path dir;
  EditedModel(const std::string& name, const std::function<void(json&)>& edit) {
    const fs::path src = "tests/golden/models/" + name;
    dir = fs::temp_directory_path() / ("sparkd_gemma4_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* f : {"generation_config.json", "model.safetensors"}) fs::copy_file(src / f, dir / f);
    json c = golden_config(name);
    edit(c);
    std::ofstream(dir / "config.json") << c.dump();
  }
  ~EditedModel() { fs::remove_all(dir); }
  LoadedModel load() const { return load_model(config_for_model(dir.string())); }
};

}  // namespace

TEST_CASE("gemma4 spec: the full layers' own geometry, K = V, proportional RoPE, the value norm and layer scalars") {
  const ModelSpec s = parse(golden_config("gemma4"));
  CHECK(s.arch == find_hf_architecture("Gemma4ForCausalLM"));
  CHECK(!s.norm_plus_one);  // Gemma 4's norms use their weights as stored
  CHECK(s.sandwich_norms);
  CHECK(s.gelu_tanh_mlp);
  CHECK(s.qk_norm);
  CHECK(s.v_norm);
  CHECK(s.layer_scalar);
  CHECK(s.scale_embedding);
  CHECK(s.query_pre_attn_scalar == 1.0);
  CHECK(s.final_logit_softcap == 30.0);
  CHECK(s.layer_sliding == std::vector<uint8_t>{1, 0, 1, 0});
  CHECK(s.sliding_window == 8);
  CHECK(s.head_dim == 16);
  CHECK(s.num_kv_heads == 2);
  CHECK(s.full_head_dim == 32);
  CHECK(s.full_num_kv_heads == 1);
  CHECK(s.full_k_eq_v);
  CHECK(s.rope_theta == 1e6);
  CHECK(s.rope_scaling.type == "proportional");
  CHECK(s.rope_scaling.rotated_fraction == 0.25);
  CHECK(s.sliding_rope_theta == 1e4);
  CHECK(s.sliding_rope_scaling.type.empty());
  CHECK(s.num_experts == 0);
  // A config without rope_parameters gets transformers' defaults by layer type.
  json bare = golden_config("gemma4");
  bare.erase("rope_parameters");
  const ModelSpec d = parse(bare);
  CHECK(d.rope_scaling.type == "proportional");
  CHECK(d.rope_scaling.rotated_fraction == 0.25);
  CHECK(d.rope_theta == 1e6);
  CHECK(d.sliding_rope_theta == 1e4);

  // Without attention_k_eq_v the full layers keep the model's KV heads and their v_proj
  // (transformers' per_layer_config); global_head_dim still applies.
  const ModelSpec m = parse(golden_config("gemma4_moe"));
  CHECK(!m.full_k_eq_v);
  CHECK(m.full_num_kv_heads == 0);
  CHECK(m.layer_num_kv_heads(1) == 2);
  CHECK(m.layer_head_dim(1) == 32);
  CHECK(m.layer_has_v_proj(1));
  CHECK(m.num_experts == 4);
  CHECK(m.num_experts_per_tok == 2);
  CHECK(m.moe_intermediate_size == 32);
  CHECK(m.moe_beside_mlp);
  CHECK(m.norm_topk_prob);
}

TEST_CASE("gemma4 layer shapes: per-layer heads and widths, the layers' parts and KV bytes a token") {
  const ModelSpec s = parse(golden_config("gemma4"));
  const std::vector<LayerShape> layers = layer_shapes(s, {0, 4});
  for (const LayerShape& l : layers) {
    CAPTURE(l.layer);
    const bool sliding = l.layer % 2 == 0;
    CHECK(l.num_heads == 4);
    CHECK(l.num_kv_heads == (sliding ? 2 : 1));
    CHECK(l.head_dim == (sliding ? 16 : 32));
    CHECK(l.rotary_dim == l.head_dim);
    CHECK(l.attention_scale == 1.0);
    CHECK(l.norm_kind == NormKind::RMS);
    CHECK(l.v_norm);
    CHECK(l.k_eq_v == !sliding);
    CHECK(l.layer_scalar);
    CHECK(l.rope_scaling.type == (sliding ? "" : "proportional"));
  }
  // Full layers: q_proj 4 x 32 rows, k_proj 1 x 32, no v_proj; o_proj reads 128 columns.
  std::map<Part, std::vector<int64_t>> full;
  for (const PartSpec& p : layer_parts(s, 1)) full[p.part] = p.shape;
  CHECK(full.at(Part::Q) == std::vector<int64_t>{128, 64});
  CHECK(full.at(Part::K) == std::vector<int64_t>{32, 64});
  CHECK(full.count(Part::V) == 0);
  CHECK(full.at(Part::O) == std::vector<int64_t>{64, 128});
  CHECK(full.at(Part::Q_NORM) == std::vector<int64_t>{32});
  CHECK(full.at(Part::LAYER_SCALAR) == std::vector<int64_t>{1});
  std::map<Part, std::vector<int64_t>> sliding;
  for (const PartSpec& p : layer_parts(s, 0)) sliding[p.part] = p.shape;
  CHECK(sliding.at(Part::V) == std::vector<int64_t>{32, 64});
  // KV a token: sliding layers 2 x 2 heads x 16, full layers 2 x 1 head x 32.
  const KvTokenSize all = kv_token_size(s, {0, 4}), window = kv_token_size(s, {0, 4}, true);
  CHECK(all.values == 2 * 64 + 2 * 64);
  CHECK(all.heads == 2 * 4 + 2 * 2);
  CHECK(window.values == 2 * 64);
  CHECK(kv_token_size(s, {1, 2}).values == 64);
  CHECK(CpuBackend::kv_bytes_per_token(s, {0, 4}) == 256 * 4);

  // The MoE model's layers: the dense MLP, the experts and the block's norms and scales.
  const ModelSpec m = parse(golden_config("gemma4_moe"));
  std::vector<Part> parts;
  for (const PartSpec& p : layer_parts(m, 2)) parts.push_back(p.part);
  for (Part p : {Part::GATE, Part::UP, Part::DOWN, Part::ROUTER, Part::EXPERT_GATE, Part::EXPERT_UP, Part::EXPERT_DOWN,
                 Part::MOE_NORM, Part::POST_MLP_NORM, Part::POST_MOE_NORM, Part::ROUTER_INPUT_SCALE, Part::EXPERT_SCALE,
                 Part::FFN_NORM, Part::POST_FFN_NORM, Part::V})
    CHECK(std::count(parts.begin(), parts.end(), p) == 1);
  CHECK(layer_shapes(m, {0, 4})[2].moe_beside_mlp);
}

TEST_CASE("gemma4 assistant spec: queries only over the model's last layer of each type, clustered logits") {
  // tests/gen/gen_gemma4_assistant.py: text_config with every layer KV-shared, the model's
  // width and the clusters beside it, as transformers 5 wrote it.
  const json c = golden_config("gemma4_assistant");
  const ModelSpec a = parse(c);
  CHECK(a.arch == find_hf_architecture("Gemma4AssistantForCausalLM"));
  CHECK(a.is_assistant());
  CHECK(a.assistant_of_hidden == 64);
  CHECK(a.hidden_size == 32);
  CHECK(a.num_centroids == 16);
  CHECK(a.centroid_top_k == 4);
  CHECK(a.final_logit_softcap == 0);  // its head's logits are not capped, whatever text_config says
  CHECK(a.layer_sliding == std::vector<uint8_t>{1, 1, 1, 0});
  for (const LayerShape& l : layer_shapes(a, {0, 4})) {
    CAPTURE(l.layer);
    CHECK(l.reads_model_kv);
    CHECK(!l.k_eq_v);
    CHECK(l.kv_values_per_token() == 0);
    CHECK(l.window == (l.layer < 3 ? 7 : 0));  // the model's window - 1: what its window cache holds for sure
  }
  std::vector<Part> parts;
  for (const PartSpec& p : layer_parts(a, 3)) parts.push_back(p.part);
  for (Part p : {Part::K, Part::V, Part::K_NORM}) CHECK(std::count(parts.begin(), parts.end(), p) == 0);
  for (Part p : {Part::Q, Part::O, Part::Q_NORM}) CHECK(std::count(parts.begin(), parts.end(), p) == 1);
  std::map<Part, std::vector<int64_t>> outer;
  for (const PartSpec& p : outer_parts(a, {0, 4})) outer[p.part] = p.shape;
  CHECK(outer.at(Part::ASSIST_IN) == std::vector<int64_t>{32, 128});
  CHECK(outer.at(Part::ASSIST_OUT) == std::vector<int64_t>{64, 32});
  CHECK(outer.at(Part::CENTROIDS) == std::vector<int64_t>{16, 32});
  CHECK(outer.at(Part::TOKEN_ORDERING) == std::vector<int64_t>{128});
  CHECK(kv_token_size(a, {0, 4}).values == 0);
  // The model's last sliding layer (2) and last full layer (3).
  CHECK(assistant_model_layers(parse(golden_config("gemma4")), a) == std::vector<int64_t>{2, 2, 2, 3});

  auto refused = [&](const std::function<void(json&)>& edit, const std::string& needle) {
    json e = c;
    edit(e);
    CHECK_INPUT_ERROR(parse(e), needle);
  };
  refused([](json& e) { e["text_config"]["num_kv_shared_layers"] = 3; }, "\"num_kv_shared_layers\" must be num_hidden_layers (4)");
  refused([](json& e) { e["num_centroids"] = 24; }, "\"num_centroids\" must divide vocab_size (128)");
  refused([](json& e) { e["centroid_intermediate_top_k"] = 17; }, "\"centroid_intermediate_top_k\" = 17 is outside [1, 16]");
  refused([](json& e) { e.erase("backbone_hidden_size"); }, "\"backbone_hidden_size\" is missing");
  refused([](json& e) { e["text_config"]["enable_moe_block"] = true; }, "is not an assistant's");
}

TEST_CASE("gemma4 layer shapes: a backend without Gemma 4's cases refuses it by name") {
  const ModelSpec s = parse(golden_config("gemma4"));
  const std::vector<LayerShape> layers = layer_shapes(s, {0, 4});
  LayerCases c{.backend = "a backend",
               .norm_placements = {NormPlacement::SANDWICH},
               .activations = {Activation::GELU_TANH},
               .per_layer_geometry = true,
               .per_layer_rope = true,
               .custom_attention_scale = true,
               .v_norm = true,
               .k_eq_v = true,
               .layer_scalar = true,
               .moe_beside_mlp = true,
               .embedding_scale = true,
               .logit_softcap = true};
  CHECK_NOTHROW(require_cases(layers, s, c));
  LayerCases without = c;
  without.per_layer_geometry = false;
  CHECK_INPUT_ERROR(require_cases(layers, s, without),
                    "a backend has no case for layer 1's own attention geometry (the model's: 4 heads, 2 kv heads, head_dim 16)");
  without = c;
  without.v_norm = false;
  CHECK_INPUT_ERROR(require_cases(layers, s, without), "no case for layer 0's value norm");
  without = c;
  without.k_eq_v = false;
  CHECK_INPUT_ERROR(require_cases(layers, s, without), "no case for layer 1's values taken from the key projection");
  without = c;
  without.layer_scalar = false;
  CHECK_INPUT_ERROR(require_cases(layers, s, without), "no case for layer 0's output scalar");
  const ModelSpec m = parse(golden_config("gemma4_moe"));
  without = c;
  without.moe_beside_mlp = false;
  CHECK_INPUT_ERROR(require_cases(layer_shapes(m, {0, 4}), m, without),
                    "no case for layer 0's dense MLP beside its experts (Gemma 4's MoE block)");
}

TEST_CASE("gemma4 rope: proportional turns the first quarter of the pairs over the whole head, the rest stay") {
  RopeScaling p;
  p.type = "proportional";
  p.rotated_fraction = 0.25;
  const cpu::Rope rope(32, 32, 1e6, p);
  std::vector<float> x(32);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) + 1;
  std::vector<float> y = x;
  rope.apply(y.data(), 1, 7);
  // Pairs (i, i + 16): i < 4 turn by 7 * 1e6^(-2i/32), the others are left as they are.
  for (int i = 0; i < 16; ++i) {
    CAPTURE(i);
    const double angle = i < 4 ? 7.0 * std::pow(1e6, -2.0 * i / 32) : 0.0;
    CHECK(y[size_t(i)] == doctest::Approx(x[size_t(i)] * std::cos(angle) - x[size_t(i) + 16] * std::sin(angle)).epsilon(1e-5));
    CHECK(y[size_t(i) + 16] == doctest::Approx(x[size_t(i) + 16] * std::cos(angle) + x[size_t(i)] * std::sin(angle)).epsilon(1e-5));
  }
  json c = golden_config("gemma4");
  c["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 1.5;
  CHECK_INPUT_ERROR(parse(c), "\"partial_rotary_factor\" must be in (0, 1]");
}

TEST_CASE("gemma4 hostile files: a clear error before anything is allocated") {
  json base = golden_config("gemma4");
  auto with = [&](const std::function<void(json&)>& edit) {
    json c = base;
    edit(c);
    return c;
  };
  CHECK_INPUT_ERROR(parse(with([](json& c) { c["layer_types"][1] = "chunked_attention"; })),
                    "\"layer_types\" [1] = \"chunked_attention\" is not one of sliding_attention, full_attention");
  CHECK_INPUT_ERROR(parse(with([](json& c) { c["layer_types"].erase(0); })), "\"layer_types\" must list one type per layer (4)");
  CHECK_INPUT_ERROR(parse(with([](json& c) { c["hidden_size_per_layer_input"] = 256; })),
                    "\"hidden_size_per_layer_input\" > 0 (per-layer input embeddings, Gemma 4 E2B / E4B) is not supported");
  CHECK_INPUT_ERROR(parse(with([](json& c) { c["num_kv_shared_layers"] = 2; })), "\"num_kv_shared_layers\" > 0");
  CHECK_INPUT_ERROR(parse(with([](json& c) { c["num_global_key_value_heads"] = 3; })),
                    "\"num_global_key_value_heads\" must divide num_attention_heads (4)");
  CHECK_INPUT_ERROR(parse(with([](json& c) { c["rope_parameters"] = {{"rope_type", "default"}}; })),
                    "\"rope_parameters\" must give the RoPE of each layer type");
  CHECK_INPUT_ERROR(parse(with([](json& c) { c["use_bidirectional_attention"] = "all"; })),
                    "\"use_bidirectional_attention\" = \"all\" is not supported");
  CHECK_INPUT_ERROR(parse(with([](json& c) { c["enable_moe_block"] = true; })), "\"num_experts\" is missing");

  // The tensors say otherwise than the config.
  CHECK_INPUT_ERROR(EditedModel("gemma4", [](json& c) { c["global_head_dim"] = 64; }).load(),
                    "model.layers.1.self_attn.q_proj.weight");
  CHECK_INPUT_ERROR(EditedModel("gemma4", [](json& c) { c["attention_k_eq_v"] = false; }).load(),
                    "model.layers.1.self_attn.v_proj.weight");
  CHECK_INPUT_ERROR(EditedModel("gemma4_moe", [](json& c) { c["moe_intermediate_size"] = 16; }).load(),
                    "experts.down_proj has shape [4, 64, 32], the config (4 experts, hidden_size 64, "
                    "moe_intermediate_size 16) implies [4, 64, 16]");
  CHECK_INPUT_ERROR(EditedModel("gemma4_moe", [](json& c) { c["enable_moe_block"] = false; }).load(),
                    "holds experts, but enable_moe_block is off");
  CHECK_NOTHROW(EditedModel("gemma4", [](json&) {}).load());
}

// The published shapes (tests/golden/configs/gemma_4_31b, gemma_4_26b_a4b: the models'
// text_config as Google's config.json gives it): parameters and KV a token by layer type.
TEST_CASE("gemma4 spec: the 31B and 26B-A4B shapes, their parameters and KV bytes a token") {
  auto read = [](const std::string& name) {
    std::ifstream in("tests/golden/configs/" + name + "/config.json");
    REQUIRE(in.good());
    return parse(json::parse(in));
  };
  const ModelSpec dense = read("gemma_4_31b"), moe = read("gemma_4_26b_a4b");
  CHECK(dense.arch == find_hf_architecture("Gemma4ForConditionalGeneration"));
  CHECK(parameter_count(dense) == 30697345340);
  CHECK(parameter_count(moe) == 25233141790);
  // 50 sliding layers x 2 x 16 x 256 and 10 full ones x 2 x 4 x 512 values (x 2 bytes in BF16:
  // 901,120); the 26B's 25 x 2 x 8 x 256 and 5 x 2 x 2 x 512.
  CHECK(kv_token_size(dense, full_range(dense)).values == 50 * 2 * 16 * 256 + 10 * 2 * 4 * 512);
  CHECK(kv_token_size(dense, full_range(dense), true).values == 50 * 2 * 16 * 256);
  CHECK(kv_token_size(moe, full_range(moe)).values == 25 * 2 * 8 * 256 + 5 * 2 * 2 * 512);
  CHECK(moe.layer_is_moe(0));
  CHECK(moe.moe_beside_mlp);
}

// 256- and 512-wide heads as the real models have them (the 31B's widths and head ratios,
// fewer and narrower layers), dummy weights: the CPU backend runs them, and a prefill in
// three chunks, past the window, gives the logits of the whole.
TEST_CASE("gemma4 cpu: 256- and 512-wide heads, whole and in chunks") {
  std::ifstream in("tests/golden/configs/gemma_4_31b/config.json");
  json c = json::parse(in);
  json& t = c["text_config"];
  t["num_hidden_layers"] = 6;
  t["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                      "sliding_attention", "full_attention"};
  t["hidden_size"] = 128;
  t["intermediate_size"] = 256;
  t["num_attention_heads"] = 8;
  t["num_key_value_heads"] = 4;
  t["num_global_key_value_heads"] = 1;
  t["vocab_size"] = 300;
  t["sliding_window"] = 16;
  const ModelSpec s = parse(c);
  REQUIRE(s.layer_head_dim(5) == 512);
  const Weights w = make_dummy_weights(s, full_range(s), DType::BF16, 3);
  std::vector<int32_t> ids(40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(3 + (i * 37) % 290);
  auto run = [&](const std::vector<std::pair<int32_t, int32_t>>& chunks) {
    CpuBackend b(s, bind_stage(s, w), 2);
    b.init_kv_cache(8, 16);
    std::vector<float> last;
    for (auto [lo, hi] : chunks) {
      Batch batch;
      batch.max_blocks_per_seq = 3;
      batch.query_start = {0, hi - lo};
      for (int32_t p = lo; p < hi; ++p) {
        batch.token_ids.push_back(ids[size_t(p)]);
        batch.positions.push_back(p);
        batch.slot_mapping.push_back(p);  // blocks 0, 1, 2 in order
      }
      batch.context_lens = {hi};
      batch.state_slots = {0};
      batch.block_tables = {0, 1, 2};
      batch.logits_rows = {hi - lo - 1};
      ForwardResult out;
      b.forward(batch, nullptr, out);
      last = out.logits;
    }
    return last;
  };
  const std::vector<float> whole = run({{0, 40}}), chunked = run({{0, 13}, {13, 29}, {29, 40}});
  REQUIRE(whole.size() == 300);
  double diff = 0, mag = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    REQUIRE(std::isfinite(whole[i]));
    diff = std::max(diff, std::fabs(double(whole[i]) - chunked[i]));
    mag = std::max(mag, std::fabs(double(whole[i])));
  }
  MESSAGE("512-wide full heads: max |logit| " << mag << ", chunked vs whole " << diff / mag);
  CHECK(mag > 0);
  CHECK(diff / mag < 1e-5);
}
