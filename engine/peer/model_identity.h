// model_identity.h — what both boxes of a pair must agree on about the model: a
// fingerprint that tells two different model files apart (the layer split is in
// engine/backend/stage_loader.h).
#pragma once
#include <cstdint>
#include <string>

#include "engine/config.h"
#include "engine/model/model_loader.h"

namespace spark {

// A hash of the architecture, every tensor's name, dtype and shape, and a few sampled
// bytes of each tensor (a weight file retrained or re-quantized under the same name
// differs); cheap, since only the sampled pages are touched.
uint64_t model_fingerprint(const ModelInfo& info);
// "SmolLM2-135M-Instruct.Q4_1.gguf (92.4 MB)": how messages name the model.
std::string model_label(const ModelInfo& info);

}  // namespace spark
