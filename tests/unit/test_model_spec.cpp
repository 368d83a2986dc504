// test_model_spec.cpp — config.json and GGUF metadata to ModelSpec, for every supported
// architecture, and the errors for configs sparkd cannot run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "engine/model/architecture.h"
#include "engine/model/arch.h"
#include "engine/model/gguf.h"
#include "engine/model/model_spec.h"
#include "engine/model/spec_readers.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::golden;
using spark::testing::golden_dir;

namespace {

void check_against_golden(const ModelSpec& s, const nlohmann::json& ref, bool from_gguf) {
  CHECK(s.architecture == ref["architecture"].get<std::string>());
  CHECK(s.vocab_size == ref["vocab_size"].get<int64_t>());
  CHECK(s.hidden_size == ref["hidden_size"].get<int64_t>());
  if (ref["num_experts"].get<int64_t>() == 0 || !from_gguf)
    CHECK(s.intermediate_size == ref["intermediate_size"].get<int64_t>());
  CHECK(s.num_layers == ref["num_layers"].get<int64_t>());
  CHECK(s.num_heads == ref["num_heads"].get<int64_t>());
  CHECK(s.num_kv_heads == ref["num_kv_heads"].get<int64_t>());
  CHECK(s.head_dim == ref["head_dim"].get<int64_t>());
  // GGUF stores eps and theta as f32.
  CHECK(static_cast<float>(s.rms_norm_eps) == static_cast<float>(ref["rms_norm_eps"].get<double>()));
  CHECK(static_cast<float>(s.rope_theta) == static_cast<float>(ref["rope_theta"].get<double>()));
  std::string rope = ref["rope_type"].get<std::string>();
  CHECK(s.rope_scaling.type == (rope == "default" ? "" : rope));
  CHECK(s.rope_scaling.factor == doctest::Approx(ref["rope_factor"].get<double>()));
  CHECK(s.max_position_embeddings == ref["max_position_embeddings"].get<int64_t>());
  CHECK(s.tie_word_embeddings == ref["tie_word_embeddings"].get<bool>());
  CHECK(s.num_experts == ref["num_experts"].get<int64_t>());
  CHECK(s.num_experts_per_tok == ref["num_experts_per_tok"].get<int64_t>());
  CHECK(s.moe_intermediate_size == ref["moe_intermediate_size"].get<int64_t>());
  CHECK(s.norm_topk_prob == ref["norm_topk_prob"].get<bool>());
  CHECK(s.bos_token_id == 1);
}

std::string minimal(const std::string& arch, const std::string& extra = "") {
  return R"({"architectures":[")" + arch + R"("],"vocab_size":100,"hidden_size":64,"intermediate_size":128,)"
         R"("num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2)" + extra + "}";
}

}  // namespace

TEST_CASE("model spec: Hugging Face folders and GGUF files give the same spec") {
  for (const auto& m : golden()["models"]) {
    std::string arch = m["arch"].get<std::string>();
    CAPTURE(arch);
    ModelSpec hf = load_hf_spec(golden_dir() + "/" + m["hf_folder"].get<std::string>());
    check_against_golden(hf, m["spec"], false);
    CHECK(hf.eos_token_ids == std::vector<int32_t>{2, 3});  // generation_config.json wins
    ModelSpec gg = spec_from_gguf(GgufFile::open(golden_dir() + "/" + m["gguf"].get<std::string>()));
    check_against_golden(gg, m["spec"], true);
    CHECK(gg.eos_token_ids == std::vector<int32_t>{2});
    CHECK(hf.arch == gg.arch);
    CHECK(hf.attention_bias == gg.attention_bias);
    CHECK(hf.qk_norm == gg.qk_norm);
    CHECK(hf.attention_bias == (arch == "qwen2"));
    CHECK(hf.qk_norm == (arch == "qwen3" || arch == "qwen3moe"));
    CHECK(hf.dtype == DType::F16);
    CHECK(gg.dtype == DType::F16);
    if (arch == "llama") {
      for (const ModelSpec* s : {&hf, &gg}) {
        CHECK(s->rope_scaling.low_freq_factor == 1.0);
        CHECK(s->rope_scaling.high_freq_factor == 4.0);
        CHECK(s->rope_scaling.original_max_position_embeddings == 8192);
      }
    }
  }
}

TEST_CASE("model spec: Llama-3.1-8B shape and parameter count") {
  ModelSpec s = load_hf_spec("tests/golden/configs/llama3_8b");
  CHECK(s.arch == find_hf_architecture("LlamaForCausalLM"));
  CHECK(s.head_dim == 128);
  CHECK(s.num_kv_heads == 8);
  CHECK(s.rope_theta == 500000.0);
  CHECK(s.rope_scaling.type == "llama3");
  CHECK(s.rope_scaling.factor == 8.0);
  CHECK(s.max_position_embeddings == 131072);
  CHECK(s.bos_token_id == 128000);
  CHECK(s.eos_token_ids == std::vector<int32_t>{128001, 128008, 128009});
  CHECK(s.dtype == DType::BF16);
  // The published parameter count of Llama-3.1-8B.
  CHECK(parameter_count(s) == 8030261248);
}

TEST_CASE("model spec: architecture-specific fields") {
  ModelSpec q2 = parse_hf_config(minimal("Qwen2ForCausalLM", R"(,"tie_word_embeddings":true,"torch_dtype":"bfloat16")"), "", "c");
  CHECK(q2.attention_bias);
  CHECK(q2.tie_word_embeddings);
  CHECK(q2.head_dim == 16);
  ModelSpec moe = parse_hf_config(minimal("Qwen3MoeForCausalLM",
      R"(,"num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":32,"decoder_sparse_step":2,"mlp_only_layers":[3],"norm_topk_prob":true,"head_dim":32)"), "", "c");
  CHECK(moe.num_experts == 8);
  CHECK(moe.head_dim == 32);
  CHECK_FALSE(moe.layer_is_moe(0));
  CHECK(moe.layer_is_moe(1));
  CHECK_FALSE(moe.layer_is_moe(2));
  CHECK_FALSE(moe.layer_is_moe(3));  // every second layer, but listed in mlp_only_layers
  ModelSpec dense = parse_hf_config(minimal("LlamaForCausalLM"), "", "c");
  CHECK_FALSE(dense.layer_is_moe(0));
  ModelSpec mis = parse_hf_config(minimal("MistralForCausalLM", R"(,"sliding_window":1024,"max_position_embeddings":32768)"), "", "c");
  CHECK(mis.max_position_embeddings == 1024);  // exact attention only inside the window
  ModelSpec mis2 = parse_hf_config(minimal("MistralForCausalLM", R"(,"sliding_window":null,"max_position_embeddings":32768)"), "", "c");
  CHECK(mis2.max_position_embeddings == 32768);
  ModelSpec old = parse_hf_config(minimal("LlamaForCausalLM", R"(,"rope_theta":1e6,"rope_scaling":{"type":"linear","factor":2.0})"), "", "c");
  CHECK(old.rope_theta == 1e6);
  CHECK(old.rope_scaling.type == "linear");
  CHECK(old.rope_scaling.factor == 2.0);
  ModelSpec eos = parse_hf_config(minimal("LlamaForCausalLM", R"(,"eos_token_id":5)"), R"({"eos_token_id":[6,7]})", "c");
  CHECK(eos.eos_token_ids == std::vector<int32_t>{6, 7});
}

TEST_CASE("model spec: configs sparkd cannot run are refused with a clear message") {
  CHECK_INPUT_ERROR(parse_hf_config(minimal("GPT2LMHeadModel"), "", "c"),
                    "architecture GPT2LMHeadModel is not supported (supported: LlamaForCausalLM, MistralForCausalLM, "
                    "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, GptOssForCausalLM, "
                    "Qwen3_5ForConditionalGeneration, Qwen3_5MoeForConditionalGeneration, Qwen3NextForCausalLM, NemotronHForCausalLM, "
                    "XLMRobertaModel, XLMRobertaForSequenceClassification, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, "
                    "Gemma4ForCausalLM, Gemma4ForConditionalGeneration, Gemma4AssistantForCausalLM)");
  CHECK_INPUT_ERROR(parse_hf_config(R"({"vocab_size":5})", "", "c"), "\"architectures\" must list");
  CHECK_INPUT_ERROR(parse_hf_config("[1]", "", "c"), "not a JSON object");
  CHECK_INPUT_ERROR(parse_hf_config("{", "", "c"), "invalid JSON");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"num_key_value_heads":3)"), "", "c"), "must divide");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"head_dim":15)"), "", "c"), "must be even");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"rope_scaling":{"rope_type":"longrope","factor":4})"), "", "c"),
                    "rope scaling type \"longrope\" is not supported");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"rope_scaling":{"rope_type":"yarn","factor":0.5})"), "", "c"),
                    "\"factor\" must be at least 1");
  CHECK_INPUT_ERROR(parse_hf_config(R"({"architectures":["LlamaForCausalLM"],"vocab_size":-1})", "", "c"), "\"vocab_size\" = -1");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"eos_token_id":100)"), "", "c"), "not a token id below vocab_size");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"torch_dtype":"int8")"), "", "c"), "torch_dtype");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"hidden_size":1e30)"), "", "c"), "must be an integer");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"num_hidden_layers":18446744073709551615)"), "", "c"), "outside");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"attention_bias":true)"), "", "c"), "attention_bias");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM", R"(,"rms_norm_eps":0)"), "", "c"), "rms_norm_eps");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("Qwen3MoeForCausalLM", R"(,"num_experts":4,"num_experts_per_tok":5,"moe_intermediate_size":8)"), "", "c"),
                    "num_experts_per_tok");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("Qwen3MoeForCausalLM", R"(,"num_experts":4,"num_experts_per_tok":2,"moe_intermediate_size":8,"mlp_only_layers":[9])"), "", "c"),
                    "mlp_only_layers");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("LlamaForCausalLM"), "{", "c"), "generation_config.json");
  CHECK_INPUT_ERROR(load_hf_spec("/nonexistent-folder"), "has no config.json");
}

TEST_CASE("model spec: XLM-RoBERTa encoders number positions after the padding row, and other encoders are refused") {
  const std::string sizes = R"(,"max_position_embeddings":514,"pad_token_id":1,"layer_norm_eps":1e-5,"type_vocab_size":1)";
  const ModelSpec s = parse_hf_config(minimal("XLMRobertaModel", sizes), "", "c");
  CHECK(s.encoder);
  CHECK(s.position_rows == 514);
  CHECK(s.position_offset == 2);
  CHECK(s.max_position_embeddings == 512);
  CHECK(s.rms_norm_eps == doctest::Approx(1e-5));
  CHECK(s.type_vocab_size == 1);
  const ModelSpec c = parse_hf_config(minimal("XLMRobertaForSequenceClassification", sizes), "", "c");
  CHECK(c.encoder);
  CHECK_INPUT_ERROR(parse_hf_config(minimal("XLMRobertaModel", sizes + R"(,"hidden_act":"gelu_new")"), "", "c"), "hidden_act");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("XLMRobertaModel", sizes + R"(,"is_decoder":true)"), "", "c"), "is_decoder");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("XLMRobertaModel", sizes + R"(,"position_embedding_type":"relative_key")"), "", "c"),
                    "position_embedding_type");
  CHECK_INPUT_ERROR(parse_hf_config(minimal("XLMRobertaModel", R"(,"max_position_embeddings":2)"), "", "c"),
                    "max_position_embeddings");
}

TEST_CASE("model spec: YaRN and gpt-oss settings as transformers reads them") {
  // YaRN: factor defaults to the ratio of the contexts; attention factor 0.1 ln(factor) + 1.
  ModelSpec y = parse_hf_config(minimal("Qwen3ForCausalLM", R"(,"max_position_embeddings":131072,
      "rope_scaling":{"rope_type":"yarn","original_max_position_embeddings":32768})"), "", "c");
  CHECK(y.rope_scaling.type == "yarn");
  CHECK(y.rope_scaling.factor == 4.0);
  CHECK(y.rope_scaling.truncate);
  CHECK(y.rope_scaling.beta_fast == 32.0);
  CHECK(y.rope_scaling.attention_factor == doctest::Approx(0.1 * std::log(4.0) + 1.0));
  const std::string oss = R"({"architectures":["GptOssForCausalLM"],"vocab_size":64,"hidden_size":64,
      "intermediate_size":32,"num_hidden_layers":3,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,
      "num_local_experts":4,"num_experts_per_tok":2,"sliding_window":128,"swiglu_limit":5.0)";
  ModelSpec g = parse_hf_config(oss + R"(,"layer_types":["full_attention","sliding_attention","full_attention"]})", "", "c");
  CHECK(g.arch == find_hf_architecture("GptOssForCausalLM"));
  CHECK((g.attention_bias && g.o_bias && g.attention_sinks && g.gptoss_moe));
  CHECK(g.swiglu_limit == 5.0);
  CHECK(g.moe_intermediate_size == 32);
  CHECK((!g.layer_is_sliding(0) && g.layer_is_sliding(1) && !g.layer_is_sliding(2)));
  CHECK(g.sliding_window == 128);
  CHECK(g.max_position_embeddings == 2048);  // the window does not cap the context as Mistral's does
  ModelSpec d = parse_hf_config(oss + "}", "", "c");  // transformers' default: sliding first, then every other
  CHECK((d.layer_is_sliding(0) && !d.layer_is_sliding(1) && d.layer_is_sliding(2)));
  CHECK_INPUT_ERROR(parse_hf_config(oss + R"(,"layer_types":["full_attention","moe","full_attention"]})", "", "c"),
                    "\"layer_types\" [1] = \"moe\" is not one of sliding_attention, full_attention");
  CHECK_INPUT_ERROR(parse_hf_config(oss + R"(,"sliding_window":0})", "", "c"), "\"sliding_window\" = 0 must be a positive");
  CHECK_INPUT_ERROR(parse_hf_config(R"({"architectures":["GptOssForCausalLM"],"vocab_size":64,"hidden_size":64,
      "intermediate_size":48,"num_hidden_layers":1,"num_attention_heads":4,"head_dim":16,"num_local_experts":4,
      "num_experts_per_tok":2,"sliding_window":8})", "", "c"), "multiples of 32");
}

namespace {

// A made-up architecture in one place, as a new architecture file would be: its class
// name, its own key, and its flags; nothing else knows it.
void read_fake_config(const ConfigReader& r, ModelSpec& s) {
  s.qk_norm = true;
  s.intermediate_size = r.integer("fake_mlp_width", 1, 4096);
}
const Architecture kFake{
    .hf_class = "FakeForCausalLM",
    .gguf_name = nullptr,
    .read_config = read_fake_config,
    .read_gguf = nullptr,
    .needs_bf16_activations = true,
};

}  // namespace

TEST_CASE("model spec: an architecture added to the registry is read through its own hooks only") {
  const std::string config = R"({"architectures":["FakeForCausalLM"],"vocab_size":100,"hidden_size":64,)"
                             R"("num_hidden_layers":2,"num_attention_heads":4,"fake_mlp_width":96})";
  CHECK_INPUT_ERROR(parse_hf_config(config, "", "fake.json"), "architecture FakeForCausalLM is not supported");
  {
    ScopedArchitecture added(kFake);
    CHECK(hf_architecture_list().find("Gemma4AssistantForCausalLM, FakeForCausalLM") != std::string::npos);
    ModelSpec s = parse_hf_config(config, "", "fake.json");
    CHECK(s.arch == &kFake);
    CHECK(s.architecture == "FakeForCausalLM");
    CHECK(s.intermediate_size == 96);
    CHECK(s.qk_norm);
    // The shared table gives its tensors: q/k norms included, no biases.
    std::vector<TensorSpec> t = expected_tensors(s, full_range(s));
    CHECK(std::count_if(t.begin(), t.end(), [](const TensorSpec& x) { return x.part == Part::Q_NORM; }) == 2);
    CHECK(std::none_of(t.begin(), t.end(), [](const TensorSpec& x) { return x.part == Part::Q_BIAS; }));
    CHECK_INPUT_ERROR(parse_hf_config(R"({"architectures":["FakeForCausalLM"],"vocab_size":100,"hidden_size":64,)"
                                      R"("num_hidden_layers":2,"num_attention_heads":4})",
                                      "", "fake.json"),
                      "\"fake_mlp_width\" is missing");
    // GGUF files of it are refused by the registry: it has no llama.cpp name.
    CHECK(gguf_architecture_list().find("fake") == std::string::npos);
  }
  CHECK(find_hf_architecture("FakeForCausalLM") == nullptr);
}

// The hybrid's config.json (tests/golden/models/qwen3_5_moe, written by transformers):
// the text model under text_config, its layer types, Gated DeltaNet geometry and partial
// rotary read from there; a bad value is refused naming the key.
TEST_CASE("model spec: a Qwen3.5 hybrid is read from text_config, and bad hybrid keys are refused by name") {
  const auto config = nlohmann::json::parse(testing::read_file("tests/golden/models/qwen3_5_moe/config.json"));
  ModelSpec s = parse_hf_config(config.dump(), "", "c");
  CHECK(s.layer_recurrent == std::vector<uint8_t>{1, 1, 1, 0});
  CHECK(s.layer_is_recurrent(0));
  CHECK_FALSE(s.layer_is_recurrent(3));
  CHECK(s.delta_net.num_k_heads == 2);
  CHECK(s.delta_net.num_v_heads == 4);
  CHECK(s.delta_net.conv_dim() == 2 * 2 * 16 + 4 * 16);
  CHECK(s.delta_net.state_values() == 128 * 3 + 4 * 16 * 16);
  CHECK(s.rotary_dim == 8);  // partial_rotary_factor 0.25 of head_dim 32
  CHECK(s.attn_output_gate);
  CHECK(s.norm_plus_one);
  CHECK(s.shared_expert_intermediate_size == 48);
  CHECK(s.eos_token_ids == std::vector<int32_t>{2});
  auto with = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json c = config;
    change(c);
    return c.dump();
  };
  CHECK_INPUT_ERROR(parse_hf_config(with([](auto& c) { c.erase("text_config"); }), "", "c"),
                    "\"text_config\" must be an object");
  CHECK_INPUT_ERROR(parse_hf_config(with([](auto& c) { c["text_config"]["layer_types"][1] = "mamba"; }), "", "c"),
                    "\"layer_types\" [1] is \"mamba\"");
  CHECK_INPUT_ERROR(parse_hf_config(with([](auto& c) { c["text_config"]["layer_types"].erase(0); }), "", "c"),
                    "\"layer_types\" must list one type per layer (4)");
  CHECK_INPUT_ERROR(parse_hf_config(with([](auto& c) { c["text_config"]["linear_num_value_heads"] = 3; }), "", "c"),
                    "\"linear_num_value_heads\" = 3 must be a multiple of linear_num_key_heads = 2");
  CHECK_INPUT_ERROR(
      parse_hf_config(with([](auto& c) { c["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.01; }), "", "c"),
      "\"partial_rotary_factor\" = 0.010000 must give an even number");
  CHECK_INPUT_ERROR(parse_hf_config(with([](auto& c) { c["text_config"]["linear_conv_kernel_dim"] = 1; }), "", "c"),
                    "\"linear_conv_kernel_dim\" = 1 is outside [2, 64]");
}
