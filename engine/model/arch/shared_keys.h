// shared_keys.h — config keys several architectures read the same way; each architecture
// file calls the ones it has.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/spec_readers.h"

namespace spark {

// Llama's attention_bias also adds an o_proj bias, and mlp_bias biases the MLP: the
// backends model neither for these architectures, so true is refused by name.
void refuse_attention_and_mlp_bias(const ConfigReader& config, const ModelSpec& spec);
// A sliding window shorter than the context is exact only up to the window: when the
// config turns it on (use_sliding_window, defaulting to `on_by_default`), the context is
// capped there.
void cap_context_at_sliding_window(const ConfigReader& config, ModelSpec& spec, bool on_by_default);
// The dense MLP's width: intermediate_size, or the GGUF's feed_forward_length.
void read_dense_mlp(const ConfigReader& config, ModelSpec& spec);
void read_dense_mlp(const GgufMetaReader& meta, ModelSpec& spec);
// Qwen's routed experts (Qwen3-MoE, Qwen3-Next): num_experts (or transformers 5's
// num_local_experts), num_experts_per_tok, moe_intermediate_size, norm_topk_prob, and an
// expert block every decoder_sparse_step layers except the mlp_only_layers, whose dense
// MLP needs intermediate_size.
void read_qwen_routed_experts(const ConfigReader& config, ModelSpec& spec, bool norm_topk_prob_default);

// Which layers attend through a sliding window (layer_types: "sliding_attention" or
// "full_attention" per layer; `default_sliding` when the config has none, transformers'
// default for the class) and the window, sliding_window, which is required when any
// layer slides.
void read_layer_types(const ConfigReader& config, ModelSpec& spec, const std::vector<uint8_t>& default_sliding);
// RoPE by layer type, as transformers 5 writes it for Gemma: rope_parameters keyed
// "full_attention" and "sliding_attention", each with its rope_theta and scaling, into the
// spec's rope_* (full layers) and sliding_rope_* (sliding layers, sliding_rope set); a type
// the object leaves out keeps what the spec holds. False, with nothing read, when the
// config has no such object.
bool read_rope_by_layer_type(const ConfigReader& config, ModelSpec& spec);

// A key llama.cpp stores per layer in GGUF files: an array of `blocks` integers in [0, hi],
// or one value for every layer. Throws InputError naming the key.
std::vector<int64_t> gguf_per_layer(const GgufMetaReader& meta, const std::string& key, int64_t blocks, int64_t hi);

}  // namespace spark
