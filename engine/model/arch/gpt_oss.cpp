// gpt_oss.cpp — gpt-oss (GptOssForCausalLM): biases on all four attention projections,
// per-head sink logits, sliding-window and full layers as layer_types lists them, and
// clamped-SwiGLU experts in every layer; its checkpoints stack the experts
// (gpt_oss_checkpoint.h turns them into the shared table's per-expert parts).
#include "engine/model/arch/gpt_oss_checkpoint.h"
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"

namespace spark {
namespace {

void read_config(const ConfigReader& r, ModelSpec& s) {
  s.attention_bias = r.boolean_or("attention_bias", true);
  if (!s.attention_bias) r.fail("attention_bias", "= false is not supported for GptOssForCausalLM");
  s.o_bias = true;
  s.attention_sinks = true;
  s.gptoss_moe = true;
  s.swiglu_limit = r.number_or("swiglu_limit", 7.0);
  s.swiglu_alpha = r.number_or("swiglu_alpha", 1.702);
  if (!(s.swiglu_limit > 0)) r.fail("swiglu_limit", "must be positive");
  std::vector<uint8_t> every_other(static_cast<size_t>(s.num_layers), 0);  // transformers' default
  for (size_t l = 0; l < every_other.size(); l += 2) every_other[l] = 1;
  read_layer_types(r, s, every_other);
  // Every layer is sparse; its experts are intermediate_size wide.
  s.num_experts = r.integer("num_local_experts", 1, MAX_EXPERTS);
  s.num_experts_per_tok = r.integer("num_experts_per_tok", 1, s.num_experts);
  s.moe_intermediate_size = r.integer("intermediate_size", 1, MAX_DIM);
  if (s.moe_intermediate_size % 32 != 0 || s.hidden_size % 32 != 0)
    r.fail("intermediate_size", "and hidden_size must be multiples of 32 (the MXFP4 block)");
}

// As llama.cpp stores it: every layer sparse, sliding-window layers first and then every
// other one (its swa pattern 2, as transformers' default layer_types).
void read_gguf(const GgufMetaReader& m, ModelSpec& s) {
  s.num_experts = m.integer("expert_count", 1, MAX_EXPERTS);
  s.num_experts_per_tok = m.integer("expert_used_count", 1, s.num_experts);
  s.moe_intermediate_size = m.integer("expert_feed_forward_length", 32, MAX_DIM);
  s.attention_bias = s.o_bias = s.attention_sinks = s.gptoss_moe = true;
  s.sliding_window = m.integer("attention.sliding_window", 1, MAX_POSITIONS);
  s.layer_sliding.assign(static_cast<size_t>(s.num_layers), 0);
  for (int64_t l = 0; l < s.num_layers; l += 2) s.layer_sliding[static_cast<size_t>(l)] = 1;
}

}  // namespace

extern const Architecture kGptOss{
    .hf_class = "GptOssForCausalLM",
    .gguf_name = "gpt-oss",
    .read_config = read_config,
    .read_gguf = read_gguf,
    .convert_checkpoint = gptoss_tensors,
    .gguf_aliases = {{"post_attention_norm", "ffn_norm"}},
    .gguf_yarn_truncates = false,
};

}  // namespace spark
