// checkpoint_names.h — what the architectures that rename a checkpoint's tensors onto the
// shared table (Architecture::convert_checkpoint) do alike: split a layer tensor's name,
// rename a file's tensors with the duplicate check, split stacked experts.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "engine/model/model_spec.h"
#include "engine/model/tensor.h"

namespace spark {

struct LayerName {
  int64_t layer;
  std::string rest;  // after the index and its dot
};
// "PREFIX12.rest" -> {12, "rest"}; nullopt unless `prefix` is followed by a decimal index of
// at most six digits and a dot.
std::optional<LayerName> split_layer_name(std::string_view name, std::string_view prefix);

// The file's tensors under the names `rename` gives them (nullopt: a tensor the model does
// not read, counted in *skipped). Throws InputError naming `source` when two tensors land
// on one name.
std::map<std::string, Tensor> renamed_tensors(const std::map<std::string, Tensor>& file,
                                              const std::function<std::optional<std::string>(const std::string&)>& rename,
                                              const std::string& source, size_t* skipped = nullptr);

// A layer's stacked experts (transformers 5's fused layout) as the table's per-expert parts,
// views of each expert's rows that need no copy: gate_up [E, 2I, H] (an expert's gate rows,
// then its up rows) or down [E, H, I], E, I and H the spec's, of any type whose rows are
// whole blocks (GGUF's). Throws InputError naming `file_name` when the shape disagrees
// with the config or the tensor has scales of its own (FP8, NVFP4).
void split_stacked_experts(const Tensor& stacked, const std::string& file_name, int64_t layer, bool gate_up,
                           const ModelSpec& spec, const std::string& source, std::map<std::string, Tensor>& out);

}  // namespace spark
