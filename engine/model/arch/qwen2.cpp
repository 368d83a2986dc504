// qwen2.cpp — Qwen2 / Qwen2.5 (Qwen2ForCausalLM): q/k/v projections always carry a bias;
// trained in BF16.
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"

namespace spark {
namespace {

void read_config(const ConfigReader& r, ModelSpec& s) {
  s.attention_bias = true;
  cap_context_at_sliding_window(r, s, false);
  read_dense_mlp(r, s);
}

void read_gguf(const GgufMetaReader& m, ModelSpec& s) { read_dense_mlp(m, s); }

}  // namespace

extern const Architecture kQwen2{
    .hf_class = "Qwen2ForCausalLM",
    .gguf_name = "qwen2",
    .read_config = read_config,
    .read_gguf = read_gguf,
    .needs_bf16_activations = true,
};

}  // namespace spark
