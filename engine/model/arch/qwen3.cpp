// qwen3.cpp — Qwen3 dense (Qwen3ForCausalLM): a per-head RMSNorm on q and k, no biases;
// trained in BF16.
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"

namespace spark {
namespace {

void read_config(const ConfigReader& r, ModelSpec& s) {
  s.qk_norm = true;
  refuse_attention_and_mlp_bias(r, s);
  cap_context_at_sliding_window(r, s, false);
  read_dense_mlp(r, s);
}

void read_gguf(const GgufMetaReader& m, ModelSpec& s) {
  s.qk_norm = true;
  read_dense_mlp(m, s);
}

}  // namespace

extern const Architecture kQwen3{
    .hf_class = "Qwen3ForCausalLM",
    .gguf_name = "qwen3",
    .read_config = read_config,
    .read_gguf = read_gguf,
    .needs_bf16_activations = true,
};

}  // namespace spark
