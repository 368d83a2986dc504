// dummy.cpp — deterministic random weights, filled in parallel straight into their buffer.
#include "engine/model/dummy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/model/arch.h"
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

// The dtype a tensor is stored in when the model's weights are `dtype`: block formats
// only for matrices whose rows are whole blocks, as a GGUF file keeps them; norms and
// biases stay f32, other matrices f16.
DType stored_dtype(const TensorSpec& t, DType dtype) {
  if (dtype_block_elems(dtype) == 1) return dtype;
  if (part_is_norm(t.part) || t.shape.size() < 2) return DType::F32;
  return t.shape.back() % dtype_block_elems(dtype) == 0 ? dtype : DType::F16;
}

}  // namespace

float dummy_uniform(uint64_t seed, const std::string& name, uint64_t index, float limit) {
  return uniform_from(name_hash(seed, name), index, limit);
}

Weights make_dummy_weights(const ModelSpec& spec, LayerRange range, DType dtype, uint64_t seed) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16 && dtype != DType::Q8_0 &&
      dtype != DType::Q4_K)
    throw InputError("dummy weights need dtype F32, F16, BF16, Q8_0 or Q4_K, not " + std::string(dtype_name(dtype)));
  std::vector<TensorSpec> need = expected_tensors(spec, range);
  std::vector<DType> dtypes;
  std::vector<size_t> offsets, sizes;
  size_t total = 0;
  for (const TensorSpec& t : need) {
    dtypes.push_back(stored_dtype(t, dtype));
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    sizes.push_back(static_cast<size_t>(n / dtype_block_elems(dtypes.back()) * dtype_block_bytes(dtypes.back())));
    offsets.push_back(total);
    total += (sizes.back() + 63) / 64 * 64;  // 64-byte aligned tensors
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
  struct Job { const TensorSpec* spec; DType dtype; uint8_t* dst; uint64_t begin, end; };
  std::vector<Job> jobs;
  for (size_t i = 0; i < need.size(); ++i) {
    Tensor t;
    t.name = need[i].name;
    t.dtype = dtypes[i];
    t.shape = need[i].shape;
    t.data = buf.get() + offsets[i];
    t.nbytes = sizes[i];
    const uint64_t row = static_cast<uint64_t>(t.cols());
    const uint64_t chunk = std::max<uint64_t>(1 << 22, row) / row * row;
    for (uint64_t b = 0; b < static_cast<uint64_t>(t.numel()); b += chunk)
      jobs.push_back({&need[i], dtypes[i], buf.get() + offsets[i], b, std::min<uint64_t>(b + chunk, t.numel())});
    w.add(std::move(t));
  }
  auto fill = [&](const Job& j) {
    float limit = limit_for(*j.spec);
    uint64_t key = name_hash(seed, j.spec->name);
    auto value = [&](uint64_t k) { return limit == 0.0f ? 1.0f : uniform_from(key, k, limit); };
    if (j.dtype == DType::Q8_0 || j.dtype == DType::Q4_K) {
      const int64_t cols = j.spec->shape.back();
      const uint64_t row_bytes = uint64_t(cols / dtype_block_elems(j.dtype) * dtype_block_bytes(j.dtype));
      std::vector<float> row(static_cast<size_t>(cols));
      for (uint64_t k = j.begin; k < j.end; k += uint64_t(cols)) {
        for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = value(k + uint64_t(c));
        uint8_t* dst = j.dst + k / uint64_t(cols) * row_bytes;
        if (j.dtype == DType::Q8_0) quantize_q8_0(row.data(), dst, cols);
        else quantize_q4_k(row.data(), dst, cols);
      }
      return;
    }
    for (uint64_t k = j.begin; k < j.end; ++k) {
      float v = value(k);
      if (j.dtype == DType::F32) {
        std::memcpy(j.dst + k * 4, &v, 4);
      } else {
        uint16_t h = j.dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
        std::memcpy(j.dst + k * 2, &h, 2);
      }
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
