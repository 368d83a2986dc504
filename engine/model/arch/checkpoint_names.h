// checkpoint_names.h — what the architectures that rename a checkpoint's tensors onto the
// shared table (Architecture::convert_checkpoint) do alike: split a layer tensor's name, and
// rename a file's tensors with the duplicate check.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

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

}  // namespace spark
