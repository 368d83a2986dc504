// model_identity.h — what both boxes of a pair must agree on: a fingerprint that tells two
// different model files apart, and the identity each box presents at the handshake (the
// layer split itself is in engine/backend/stage_loader.h).
#pragma once
#include <cstdint>
#include <string>

#include "engine/backend/stage_loader.h"
#include "engine/config.h"
#include "engine/model/model_loader.h"
#include "engine/peer/messages.h"

namespace spark {

// A hash of the architecture, every tensor's name, dtype and shape, and a few sampled
// bytes of each tensor (a weight file retrained or re-quantized under the same name
// differs); cheap, since only the sampled pages are touched.
uint64_t model_fingerprint(const ModelInfo& info);
// "SmolLM2-135M-Instruct.Q4_1.gguf (92.4 MB)": how messages name the model.
std::string model_label(const ModelInfo& info);

// What this box says about itself at the handshake, head or worker alike. kv_blocks: on
// the head, the blocks its tables address; on the worker, the blocks it can hold.
PeerIdentity local_identity(const Config& config, const StagePlan& stage, int64_t kv_blocks);

}  // namespace spark
