// nemotron_h_gguf.h — Nemotron-H from llama.cpp's GGUF files (nemotron_h, nemotron_h_moe):
// the hooks nemotron_h.cpp's two Architecture rows share.
#pragma once
#include <map>
#include <string>

#include "engine/model/model_spec.h"
#include "engine/model/spec_readers.h"
#include "engine/model/tensor.h"
#include "engine/model/weights.h"

namespace spark {

// The layers' kinds from the pattern string (hybrid_override_pattern's letters, one a layer:
// M Mamba-2, * attention, - MLP, E MoE), defined in nemotron_h.cpp.
void set_nemotron_h_pattern(ModelSpec& spec, const std::string& pattern);

// The layer pattern from the per-layer arrays, the Mamba-2 sizes from ssm.*, the experts
// from expert_*.
void read_nemotron_h_gguf(const GgufMetaReader& meta, ModelSpec& spec);
// The file's tensors (already under Hugging Face names, llama.cpp's ssm_* read as the
// DeltaNet's parts they share names with) as the shared table's Mamba-2 parts, with
// llama.cpp's reshapes and its A = -exp(A_log) undone.
std::map<std::string, Tensor> convert_nemotron_h_gguf(const std::map<std::string, Tensor>& file, const ModelSpec& spec,
                                                      LayerRange range, Weights* keep, const std::string& source);

}  // namespace spark
