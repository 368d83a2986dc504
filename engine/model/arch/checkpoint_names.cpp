// checkpoint_names.cpp — layer names split, a checkpoint's tensors renamed, stacked experts split.
#include "engine/model/arch/checkpoint_names.h"

#include "engine/model/arch.h"
#include "engine/model/shape_text.h"
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

namespace {

// Expert e's rows [first, first + rows) of a stacked [E, R, C] tensor, as a tensor of its own.
Tensor expert_rows(const Tensor& stacked, int64_t e, int64_t first, int64_t rows, std::string name) {
  const int64_t R = stacked.shape[1], C = stacked.shape[2];
  const size_t row_bytes = stacked.nbytes / size_t(stacked.shape[0] * R);
  Tensor t = stacked;
  t.name = std::move(name);
  t.shape = {rows, C};
  t.nbytes = row_bytes * size_t(rows);
  t.data = static_cast<const uint8_t*>(stacked.data) + row_bytes * size_t(e * R + first);
  return t;
}

}  // namespace

void split_stacked_experts(const Tensor& t, const std::string& file_name, int64_t layer, bool gate_up,
                           const ModelSpec& spec, const std::string& source, std::map<std::string, Tensor>& out) {
  const int64_t E = spec.num_experts, I = spec.moe_intermediate_size, H = spec.hidden_size;
  const std::vector<int64_t> want = gate_up ? std::vector<int64_t>{E, 2 * I, H} : std::vector<int64_t>{E, H, I};
  if (t.shape != want)
    throw InputError(source + ": tensor " + file_name + " has shape " + shape_str(t.shape) + ", the config (" +
                     std::to_string(E) + " experts, hidden_size " + std::to_string(H) + ", moe_intermediate_size " +
                     std::to_string(I) + ") implies " + shape_str(want));
  // Rows are whole blocks of any GGUF type, so an expert's rows are a slice; scales kept
  // beside the tensor (FP8's, NVFP4's) would need slicing too.
  if (t.scale != nullptr)
    throw InputError(source + ": stacked expert tensor " + file_name + " has dtype " + std::string(dtype_name(t.dtype)) +
                     " with scales of its own; such stacked experts are not supported");
  for (int64_t e = 0; e < E; ++e) {
    if (gate_up) {
      Tensor g = expert_rows(t, e, 0, I, tensor_name(Part::EXPERT_GATE, layer, e));
      Tensor u = expert_rows(t, e, I, I, tensor_name(Part::EXPERT_UP, layer, e));
      out[g.name] = g;
      out[u.name] = u;
    } else {
      Tensor d = expert_rows(t, e, 0, H, tensor_name(Part::EXPERT_DOWN, layer, e));
      out[d.name] = d;
    }
  }
}

}  // namespace spark
