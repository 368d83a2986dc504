// model_identity.h — what both boxes of a pair must agree on about the model: which
// layers each holds, and a fingerprint that tells two different model files apart.
#pragma once
#include <cstdint>
#include <string>

#include "engine/config.h"
#include "engine/model/model_loader.h"

namespace spark {

// The first layer of the worker: peer.layer_split, or with "auto" the split that gives
// both boxes about the same work per token (weight bytes read per step on a GPU, weights
// decoded per step on the CPU). Throws InputError for a split outside [1, num_layers - 1]
// or text that is not a number.
int64_t resolve_layer_split(const Config& config, const ModelInfo& info);

// This box's layers: all of them, or its half of the pair.
LayerRange stage_range(const Config& config, const ModelInfo& info);

// A hash of the architecture, every tensor's name, dtype and shape, and a few sampled
// bytes of each tensor (a weight file retrained or re-quantized under the same name
// differs); cheap, since only the sampled pages are touched.
uint64_t model_fingerprint(const ModelInfo& info);
// "SmolLM2-135M-Instruct.Q4_1.gguf (92.4 MB)": how messages name the model.
std::string model_label(const ModelInfo& info);

}  // namespace spark
