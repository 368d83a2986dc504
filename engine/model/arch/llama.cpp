// llama.cpp — Llama 2/3.x (LlamaForCausalLM): the shared decoder as it is, no biases.
// llama.cpp's converter permutes its Q and K rows for an interleaved RoPE.
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"

namespace spark {
namespace {

void read_config(const ConfigReader& r, ModelSpec& s) {
  refuse_attention_and_mlp_bias(r, s);
  cap_context_at_sliding_window(r, s, false);
  read_dense_mlp(r, s);
}

void read_gguf(const GgufMetaReader& m, ModelSpec& s) { read_dense_mlp(m, s); }

}  // namespace

extern const Architecture kLlama{
    .hf_class = "LlamaForCausalLM",
    .gguf_name = "llama",
    .read_config = read_config,
    .read_gguf = read_gguf,
    .gguf_qk_rows_permuted = true,
};

}  // namespace spark
