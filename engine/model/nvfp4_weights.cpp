// nvfp4_weights.cpp — ModelOpt's NVFP4 tensors repacked into GGUF's blocks, and the checks
// of a ModelOpt checkpoint (nvfp4_weights.h).
#include "engine/model/nvfp4_weights.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/model/quant.h"
#include "engine/model/shape_text.h"
#include "engine/util/check.h"
#include "engine/util/mmap.h"

namespace spark {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// An E4M3 scale byte a block can use: not NaN (0x7F, 0xFF) and not negative.
void check_scale_byte(uint8_t v, const std::string& tensor, int64_t index, const std::string& source) {
  if ((v & 0x7F) == 0x7F)
    throw InputError(source + ": tensor '" + tensor + "' holds a NaN E4M3 scale at element " + std::to_string(index) +
                     "; the file is damaged");
  if (v & 0x80)
    throw InputError(source + ": tensor '" + tensor + "' holds a negative E4M3 scale at element " +
                     std::to_string(index) + "; block scales must be positive");
}

const Tensor& side_tensor(const std::map<std::string, Tensor>& found, const std::string& name, const Tensor& weight,
                          const std::string& source) {
  const auto it = found.find(name);
  if (it == found.end())
    throw InputError(source + ": NVFP4 weight '" + weight.name + "' has no scale tensor '" + name + "'");
  return it->second;
}

}  // namespace

bool is_modelopt_side_name(const std::string& name) {
  for (const char* tail : {".weight_scale", ".weight_scale_2", ".input_scale", ".k_scale", ".v_scale"})
    if (ends_with(name, tail)) return true;
  return false;
}

const float* checked_tensor_scales(const Tensor& s, int64_t count, const std::string& source) {
  if (s.dtype != DType::F32)
    throw InputError(source + ": scale tensor '" + s.name + "' has dtype " + std::string(dtype_name(s.dtype)) +
                     "; it must be F32");
  if (s.numel() != count || s.shape.size() > (count == 1 ? 1u : 2u))
    throw InputError(source + ": scale tensor '" + s.name + "' has shape " + shape_str(s.shape) + "; it must hold " +
                     (count == 1 ? std::string("one value ([] or [1])") : std::to_string(count) + " values"));
  const auto* v = static_cast<const float*>(s.data);
  for (int64_t i = 0; i < count; ++i) {
    float x;
    std::memcpy(&x, v + i, sizeof x);
    if (!std::isfinite(x) || !(x > 0))
      throw InputError(source + ": scale tensor '" + s.name + "' holds " + (std::isnan(x) ? "NaN" : std::to_string(x)) +
                       (count == 1 ? "" : " at element " + std::to_string(i)) + "; scales must be finite and positive");
  }
  return v;
}

void check_modelopt_layers(const std::map<std::string, Tensor>& found, const ModelSpec& spec,
                           const std::string& source) {
  for (const auto& [layer, algo] : spec.modelopt_layers) {
    const auto it = found.find(layer + ".weight");
    if (it == found.end())
      throw InputError(source + ": quantized_layers names '" + layer + "', but the checkpoint has no tensor '" +
                       layer + ".weight'");
    const DType want = algo == "FP8" ? DType::F8_E4M3 : DType::U8;
    if (it->second.dtype != want)
      throw InputError(source + ": quantized_layers says '" + layer + "' is " + algo + ", but '" + it->first +
                       "' is " + std::string(dtype_name(it->second.dtype)) + " (" + algo + " stores " +
                       std::string(dtype_name(want)) + ")");
  }
}

void check_modelopt_scales(const std::map<std::string, Tensor>& found, const std::string& source) {
  for (const auto& [name, t] : found)
    if (ends_with(name, ".input_scale") || ends_with(name, ".k_scale") || ends_with(name, ".v_scale"))
      checked_tensor_scales(t, 1, source);
}

std::map<std::string, Tensor> nvfp4_header_view(const std::map<std::string, Tensor>& found,
                                                const std::string& source) {
  std::map<std::string, Tensor> out = found;
  for (auto& [name, t] : out) {
    if (t.dtype != DType::U8 || !ends_with(name, ".weight") || !found.count(name.substr(0, name.size() - 7) + ".weight_scale"))
      continue;
    if (t.shape.size() != 2 || t.shape[1] % 32 != 0)
      throw InputError(source + ": NVFP4 weight '" + name + "' is U8 " + shape_str(t.shape) +
                       "; it must be a matrix of rows of a multiple of 64 values (32 bytes), as NVFP4 is read in "
                       "blocks of 64");
    const std::string base = name.substr(0, name.size() - 7);  // without ".weight"
    const Tensor& bs = side_tensor(found, base + ".weight_scale", t, source);
    const std::vector<int64_t> grid{t.shape[0], t.shape[1] * 2 / 16};
    if (bs.dtype != DType::F8_E4M3 || bs.shape != grid)
      throw InputError(source + ": scale tensor '" + bs.name + "' is " + std::string(dtype_name(bs.dtype)) + " " +
                       shape_str(bs.shape) + "; for '" + name + "' (" + shape_str({t.shape[0], t.shape[1] * 2}) +
                       " values) it must be F8_E4M3 of shape " + shape_str(grid) + ", one scale per 16 values");
    side_tensor(found, base + ".weight_scale_2", t, source);
    t.dtype = DType::NVFP4;
    t.shape[1] *= 2;
    t.nbytes = size_t(t.shape[0] * (t.shape[1] / 64)) * sizeof(BlockNVFP4);
  }
  return out;
}

Tensor nvfp4_from_modelopt(const std::map<std::string, Tensor>& found, const Tensor& t, Weights& w,
                           const std::string& source) {
  SPARK_CHECK(t.dtype == DType::NVFP4 && t.shape.size() == 2 && t.shape[1] % 64 == 0,
              "nvfp4_from_modelopt: " + t.name + " is not from nvfp4_header_view");
  const std::string base = t.name.substr(0, t.name.size() - 7);  // without ".weight"
  const Tensor& bs = side_tensor(found, base + ".weight_scale", t, source);  // checked by nvfp4_header_view
  const float* global = checked_tensor_scales(side_tensor(found, base + ".weight_scale_2", t, source), 1, source);
  // Every block scale, before anything is allocated (1/9 of the tensor's bytes).
  const auto* scales = static_cast<const uint8_t*>(bs.data);
  for (size_t i = 0; i < bs.nbytes; ++i) check_scale_byte(scales[i], bs.name, int64_t(i), source);
  // The file's scale may sit at any offset: a copy, aligned.
  auto scale = std::make_shared<float>();
  std::memcpy(scale.get(), global, sizeof(float));
  Tensor n = t;
  n.modelopt_block_scales = scales;
  n.scale = scale.get();
  n.scale_block_rows = t.rows();
  n.scale_block_cols = t.cols();
  w.keep_alive(std::move(scale));
  return n;
}

void nvfp4_rows(const Tensor& t, int64_t row0, int64_t n, uint8_t* dst) {
  SPARK_CHECK(t.dtype == DType::NVFP4 && row0 >= 0 && n >= 0 && row0 + n <= t.rows(), "nvfp4_rows: bad rows of " + t.name);
  const int64_t cols = t.cols(), row_bytes = cols / 64 * int64_t(sizeof(BlockNVFP4));
  const auto* data = static_cast<const uint8_t*>(t.data);
  if (!t.modelopt_block_scales) {
    std::memcpy(dst, data + row0 * row_bytes, size_t(n * row_bytes));
    return;
  }
  for (int64_t r = row0; r < row0 + n; ++r, dst += row_bytes)
    modelopt_nvfp4_row_to_blocks(data + r * cols / 2, t.modelopt_block_scales + r * cols / 16, cols, dst);
}

void materialize_nvfp4(Weights& w) {
  std::vector<Tensor> lazy;
  for (const auto& [name, t] : w.all())
    if (t.modelopt_block_scales) lazy.push_back(t);
  for (Tensor& t : lazy) {
    auto blocks = std::make_shared<std::vector<uint8_t>>(t.nbytes);
    nvfp4_rows(t, 0, t.rows(), blocks->data());
    release_mapped_pages(t.data, size_t(t.rows() * t.cols() / 2));
    release_mapped_pages(t.modelopt_block_scales, size_t(t.rows() * t.cols() / 16));
    t.data = blocks->data();
    t.modelopt_block_scales = nullptr;
    w.replace(std::move(t), {std::move(blocks)});
  }
}

void check_nvfp4_block_scales(const Tensor& t, const std::string& source) {
  const auto* b = static_cast<const uint8_t*>(t.data);
  const size_t blocks = t.nbytes / sizeof(BlockNVFP4);
  for (size_t i = 0; i < blocks; ++i)
    for (int s = 0; s < 4; ++s)
      if ((b[i * sizeof(BlockNVFP4) + size_t(s)] & 0x7F) == 0x7F)
        throw InputError(source + ": tensor '" + t.name + "' (NVFP4) has a NaN block scale in block " +
                         std::to_string(i) + " (row " + std::to_string(int64_t(i) / (t.cols() / 64)) +
                         "); the file is damaged");
}

}  // namespace spark
