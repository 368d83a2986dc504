// gpt_oss_checkpoint.h — gpt-oss safetensors checkpoints as the per-expert parts of arch.h.
#pragma once
#include <map>
#include <string>

#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark {

// The tensors of a gpt-oss checkpoint (`file`, under its Hugging Face names) under the
// names arch.h gives the parts: the router renamed, and each layer's stacked experts
// split per expert with gate and up rows de-interleaved; MXFP4 blocks and their E8M0
// scales are repacked into GGUF-layout MXFP4 blocks, unquantized stacked experts
// ([E, in, out]) transposed to rows. Every other tensor passes through unchanged.
// With `keep` null only names, shapes, dtypes and byte sizes are filled (what
// check_tensor_set compares); otherwise the experts of the layers in `range` get their
// bytes in buffers `keep` holds. Throws InputError naming a stacked tensor whose shape
// or dtype disagrees with the config.
std::map<std::string, Tensor> gptoss_tensors(const std::map<std::string, Tensor>& file, const ModelSpec& spec,
                                             LayerRange range, Weights* keep, const std::string& source);

}  // namespace spark
