// dummy.cpp — deterministic random weights, filled in parallel straight into their buffer.
#include "engine/model/dummy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/model/arch.h"
#include "engine/model/dtype_table.h"
#include "engine/model/quant.h"
#include "engine/model/quantize.h"
#include "engine/util/check.h"
#include "engine/util/splitmix.h"

namespace spark {
namespace {

uint64_t name_hash(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

float uniform_from(uint64_t key, uint64_t index, float limit) {
  uint64_t r = splitmix64(key + index * 0xD1B54A32D192ED03ull);
  float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1) from 24 bits
  return (2.0f * u - 1.0f) * limit;
}

// The uniform limit giving standard deviation `std`: sqrt(3) * std.
float limit_for(const TensorSpec& t) {
  if (part_is_norm(t.part)) return 0.0f;  // filled with 1
  if (t.shape.size() == 1 || t.part == Part::EMBEDDING) return std::sqrt(3.0f) * 0.02f;
  float fan_in = static_cast<float>(t.shape.back());
  return std::sqrt(3.0f) / std::sqrt(fan_in);
}

}  // namespace

float dummy_uniform(uint64_t seed, const std::string& name, uint64_t index, float limit) {
  return uniform_from(name_hash(seed, name), index, limit);
}

DType dummy_tensor_dtype(const ModelSpec& spec, const TensorSpec& t, DType dtype) {
  const bool expert_matrix = t.part == Part::EXPERT_GATE || t.part == Part::EXPERT_UP || t.part == Part::EXPERT_DOWN;
  if (spec.mxfp4_experts && expert_matrix && t.shape.back() % dtype_block_elems(DType::MXFP4) == 0) return DType::MXFP4;
  if (dtype == DType::F8_E4M3) {
    if (part_is_norm(t.part) || t.shape.size() < 2) return DType::F32;
    return t.part == Part::EMBEDDING || t.part == Part::LM_HEAD || t.part == Part::ROUTER ? DType::BF16 : dtype;
  }
  if (dtype_block_elems(dtype) == 1) return dtype;
  if (part_is_norm(t.part) || t.shape.size() < 2) return DType::F32;
  return t.shape.back() % dtype_block_elems(dtype) == 0 ? dtype : DType::F16;
}

uint64_t dummy_weight_bytes(const ModelSpec& spec, LayerRange range, DType dtype) {
  uint64_t total = 0;
  for (const TensorSpec& t : expected_tensors(spec, range)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    total += uint64_t(dtype_nbytes(dummy_tensor_dtype(spec, t, dtype), n, t.shape.back()));
  }
  return total;
}

Weights make_dummy_weights(const ModelSpec& spec, LayerRange range, DType dtype, uint64_t seed,
                           const WeightQuantization& quantize) {
  if (!dtype_info(dtype).dummy)
    throw InputError("dummy weights need dtype " + dummy_dtype_list() + ", not " + std::string(dtype_name(dtype)));
  if (dtype == DType::F8_E4M3 && !spec.fp8)
    throw InputError("FP8 dummy weights need an FP8 model (quantization_config quant_method fp8)");
  std::vector<TensorSpec> need = expected_tensors(spec, range);
  std::vector<DType> dtypes;
  std::vector<size_t> offsets, sizes, scale_offsets;  // FP8: the f32 scale grid after the bytes
  size_t total = 0;
  auto scale_block = [&spec](const TensorSpec& t, bool cols) {  // one scale a row without block sizes
    const int64_t b = cols ? spec.fp8_block_cols : spec.fp8_block_rows;
    return b > 0 ? b : cols ? t.shape.back() : 1;
  };
  for (const TensorSpec& t : need) {
    const DType stored = dummy_tensor_dtype(spec, t, dtype);
    dtypes.push_back(t.shape.size() == 2 ? served_dtype(quantize, spec, t.part, stored, t.shape.back()) : stored);
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    sizes.push_back(static_cast<size_t>(n / dtype_block_elems(dtypes.back()) * dtype_block_bytes(dtypes.back())));
    offsets.push_back(total);
    total += (sizes.back() + 63) / 64 * 64;  // 64-byte aligned tensors
    scale_offsets.push_back(total);
    if (dtypes.back() == DType::F8_E4M3) {
      const int64_t rows = n / t.shape.back(), cols = t.shape.back();
      const int64_t grid = (rows + scale_block(t, false) - 1) / scale_block(t, false) *
                           ((cols + scale_block(t, true) - 1) / scale_block(t, true));
      total += (size_t(grid) * 4 + 63) / 64 * 64;
    }
  }
  // One allocation, owned by the registry; new[] of uint8_t leaves pages untouched
  // until the fill writes them, so the fill is the only pass over the memory.
  std::shared_ptr<uint8_t[]> buf;
  try {
    buf.reset(new uint8_t[std::max<size_t>(total, 1)]);
  } catch (const std::bad_alloc&) {
    throw RuntimeError("cannot allocate " + std::to_string(total) + " bytes of dummy weights");
  }
  Weights w;
  w.set_range(range);
  // Elements [begin, end) of one tensor; whole rows for block formats.
  struct Job { const TensorSpec* spec; DType dtype; uint8_t* dst; uint64_t begin, end; float* scales; int64_t band, block_cols; };
  std::vector<Job> jobs;
  for (size_t i = 0; i < need.size(); ++i) {
    Tensor t;
    t.name = need[i].name;
    t.dtype = dtypes[i];
    t.shape = need[i].shape;
    t.data = buf.get() + offsets[i];
    t.nbytes = sizes[i];
    const uint64_t row = static_cast<uint64_t>(t.cols());
    uint64_t chunk = std::max<uint64_t>(1 << 22, row) / row * row;
    if (t.dtype == DType::F8_E4M3) {  // whole bands of scale blocks
      t.scale = reinterpret_cast<const float*>(buf.get() + scale_offsets[i]);
      t.scale_block_rows = scale_block(need[i], false);
      t.scale_block_cols = scale_block(need[i], true);
      const uint64_t band = uint64_t(t.scale_block_rows) * row;
      chunk = std::max(chunk / band, uint64_t(1)) * band;
    }
    for (uint64_t b = 0; b < static_cast<uint64_t>(t.numel()); b += chunk)
      jobs.push_back({&need[i], dtypes[i], buf.get() + offsets[i], b, std::min<uint64_t>(b + chunk, t.numel()),
                      reinterpret_cast<float*>(buf.get() + scale_offsets[i]), t.scale_block_rows, t.scale_block_cols});
    w.add(std::move(t));
  }
  auto fill = [&](const Job& j) {
    float limit = limit_for(*j.spec);
    uint64_t key = name_hash(seed, j.spec->name);
    auto value = [&](uint64_t k) { return limit == 0.0f ? 1.0f : uniform_from(key, k, limit); };
    if (j.dtype == DType::F8_E4M3) {  // a band of block rows at a time: its blocks' scales need all of it
      const int64_t cols = j.spec->shape.back(), grid_cols = (cols + j.block_cols - 1) / j.block_cols;
      std::vector<float> band(size_t(j.band * cols));
      for (uint64_t k = j.begin; k < j.end; k += uint64_t(j.band * cols)) {
        const int64_t rows = std::min<int64_t>(j.band, int64_t(j.end - k) / cols);
        for (int64_t e = 0; e < rows * cols; ++e) band[size_t(e)] = value(k + uint64_t(e));
        const int64_t first_row = int64_t(k) / cols;
        quantize_fp8_e4m3(band.data(), rows, cols, j.block_cols, j.dst + k, j.scales + first_row / j.band * grid_cols);
      }
      return;
    }
    // Whole rows (each job's range is), encoded one at a time.
    const int64_t cols = j.spec->shape.back();
    const uint64_t row_bytes = uint64_t(cols / dtype_block_elems(j.dtype) * dtype_block_bytes(j.dtype));
    const auto encode = dtype_info(j.dtype).encode;
    SPARK_CHECK(encode != nullptr, "dummy weights: no encoder for " + std::string(dtype_name(j.dtype)));
    std::vector<float> row(static_cast<size_t>(cols));
    for (uint64_t k = j.begin; k < j.end; k += uint64_t(cols)) {
      for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = value(k + uint64_t(c));
      encode(row.data(), j.dst + k / uint64_t(cols) * row_bytes, cols);
    }
  };
  unsigned n_threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 16));
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n_threads; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < jobs.size(); i += n_threads) fill(jobs[i]);
    });
  for (auto& th : threads) th.join();
  w.keep_alive(std::shared_ptr<const void>(buf, buf.get()));
  return w;
}

}  // namespace spark
