// checkpoint_names.cpp — layer names split, and a checkpoint's tensors renamed.
#include "engine/model/arch/checkpoint_names.h"

#include "engine/util/check.h"

namespace spark {

std::optional<LayerName> split_layer_name(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string_view::npos || dot == prefix.size() || dot - prefix.size() > 6) return std::nullopt;
  const std::string_view index = name.substr(prefix.size(), dot - prefix.size());
  if (index.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  return LayerName{std::stoll(std::string(index)), std::string(name.substr(dot + 1))};
}

std::map<std::string, Tensor> renamed_tensors(const std::map<std::string, Tensor>& file,
                                              const std::function<std::optional<std::string>(const std::string&)>& rename,
                                              const std::string& source, size_t* skipped) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, tensor] : file) {
    std::optional<std::string> renamed = rename(name);
    if (!renamed) {
      if (skipped) ++*skipped;
      continue;
    }
    Tensor t = tensor;
    t.name = *renamed;
    if (!out.emplace(t.name, t).second)
      throw InputError(source + ": tensor '" + name + "' is stored twice (as '" + t.name + "')");
  }
  return out;
}

}  // namespace spark
