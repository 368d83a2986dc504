// gated_delta_net_keys.h — the config keys of the Gated DeltaNet hybrids (Qwen3.5 / 3.6 and
// Qwen3-Next), which read them alike.
#pragma once
#include "engine/model/model_spec.h"
#include "engine/model/spec_readers.h"

namespace spark {

// Attention layers with q/k norm, an output gate and partial rotary embeddings
// (partial_rotary_factor, a quarter by default); zero-centred RMSNorm; SiLU; no biases;
// which layers are DeltaNet ones (layer_types, or every full_attention_interval-th layer
// attending); the DeltaNet head counts and sizes and its conv kernel.
void read_gated_delta_net_hybrid(const ConfigReader& config, ModelSpec& spec);
// The same from llama.cpp's GGUF keys (full_attention_interval, ssm.*; the rotary
// dimensions are the shared rope.dimension_count). The file's layers end before its
// multi-token-prediction block (nextn_predict_layers), and its value heads are tiled.
void read_gated_delta_net_hybrid(const GgufMetaReader& meta, ModelSpec& spec);

}  // namespace spark
