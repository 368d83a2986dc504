// fp8_weights.cpp — the scales of FP8 checkpoints (fp8_weights.h).
#include "engine/model/fp8_weights.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "engine/model/quant.h"
#include "engine/util/check.h"

namespace spark {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

float scale_value(const Tensor& s, int64_t i) {
  const auto* b = static_cast<const uint8_t*>(s.data);
  switch (s.dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, b + 4 * i, 4);
      return v;
    }
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, b + 2 * i, 2);
      return bf16_to_f32(v);
    }
    default: {
      uint16_t v;
      std::memcpy(&v, b + 2 * i, 2);
      return f16_to_f32(v);
    }
  }
}

}  // namespace

bool is_fp8_scale_name(const std::string& name) {
  return ends_with(name, ".weight_scale_inv") || ends_with(name, ".weight_scale") || ends_with(name, ".input_scale");
}

float fp8_e4m3_to_f32(uint8_t v) {
  const int sign = v >> 7, exp = (v >> 3) & 15, man = v & 7;
  if (exp == 15 && man == 7) return std::nanf("");
  const float mag = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(float(8 + man), exp - 10);
  return sign ? -mag : mag;
}

void attach_fp8_scales(const std::map<std::string, Tensor>& found, const ModelSpec& spec, Tensor& t, Weights& w,
                       const std::string& source) {
  const std::string where = source + ": FP8 weight '" + t.name + "'";
  if (!spec.fp8) throw InputError(where + " is e4m3, but config.json has no quantization_config of quant_method fp8");
  if (t.shape.size() != 2) throw InputError(where + " is not a matrix");
  const bool blocks = spec.fp8_block_rows > 0;
  const std::string name = t.name + (blocks ? "_scale_inv" : "_scale");
  auto it = found.find(name);
  if (it == found.end()) throw InputError(where + " has no scale tensor '" + name + "'");
  const Tensor& s = it->second;
  if (s.dtype != DType::F32 && s.dtype != DType::BF16 && s.dtype != DType::F16)
    throw InputError(source + ": scale tensor '" + name + "' has dtype " + std::string(dtype_name(s.dtype)) +
                     "; FP8 scales must be F32, BF16 or F16");
  const int64_t rows = t.rows(), cols = t.cols();
  if (blocks) {
    t.scale_block_rows = spec.fp8_block_rows;
    t.scale_block_cols = spec.fp8_block_cols;
    if (s.shape != std::vector<int64_t>{t.scale_grid_rows(), t.scale_grid_cols()})
      throw InputError(source + ": scale tensor '" + name + "' is " + shape_text(s.shape) + ", but " +
                       shape_text(t.shape) + " in " + std::to_string(spec.fp8_block_rows) + "x" +
                       std::to_string(spec.fp8_block_cols) + " blocks needs " +
                       shape_text({t.scale_grid_rows(), t.scale_grid_cols()}));
  } else if (s.numel() == 1 && s.shape.size() <= 1) {
    t.scale_block_rows = rows;
    t.scale_block_cols = cols;
  } else if (s.shape == std::vector<int64_t>{rows} || s.shape == std::vector<int64_t>{rows, 1}) {
    t.scale_block_rows = 1;
    t.scale_block_cols = cols;
  } else {
    throw InputError(source + ": scale tensor '" + name + "' is " + shape_text(s.shape) + "; for " +
                     shape_text(t.shape) + " it must be [1] (per tensor) or [" + std::to_string(rows) +
                     ", 1] (per output channel)");
  }
  const int64_t n = t.scale_grid_rows() * t.scale_grid_cols();
  auto buf = std::make_shared<std::vector<float>>(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = scale_value(s, i);
    if (!std::isfinite(v) || !(v > 0))
      throw InputError(source + ": scale tensor '" + name + "' holds " + std::to_string(v) + " at element " +
                       std::to_string(i) + "; scales must be finite and positive");
    (*buf)[size_t(i)] = v;
  }
  t.scale = buf->data();
  w.keep_alive(std::move(buf));
}

}  // namespace spark
