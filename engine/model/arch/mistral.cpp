// mistral.cpp — Mistral (MistralForCausalLM): Llama's decoder, whose sliding window is on
// unless the config turns it off. llama.cpp stores Mistral GGUF files as "llama".
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"

namespace spark {
namespace {

void read_config(const ConfigReader& r, ModelSpec& s) {
  refuse_attention_and_mlp_bias(r, s);
  cap_context_at_sliding_window(r, s, true);
  read_dense_mlp(r, s);
}

}  // namespace

extern const Architecture kMistral{
    .hf_class = "MistralForCausalLM",
    .gguf_name = nullptr,
    .read_config = read_config,
    .read_gguf = nullptr,
};

}  // namespace spark
