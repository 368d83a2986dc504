// dummy.cpp — deterministic random weights, filled in parallel straight into their buffer.
#include "engine/model/dummy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "engine/model/arch.h"
#include "engine/model/quant.h"
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

uint16_t f32_to_f16(float f) {
  // Round to nearest even; the values here are small and normal, far from overflow.
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t man = x & 0x7FFFFF;
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t h = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  uint32_t rem = man & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
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

Weights make_dummy_weights(const ModelSpec& spec, LayerRange range, DType dtype, uint64_t seed) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    throw InputError("dummy weights need dtype F32, F16 or BF16, not " + std::string(dtype_name(dtype)));
  std::vector<TensorSpec> need = expected_tensors(spec, range);
  size_t elem = static_cast<size_t>(dtype_block_bytes(dtype));
  std::vector<size_t> offsets;
  size_t total = 0;
  for (const TensorSpec& t : need) {
    offsets.push_back(total);
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    total += (static_cast<size_t>(n) * elem + 63) / 64 * 64;  // 64-byte aligned tensors
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
  struct Job { const TensorSpec* spec; uint8_t* dst; uint64_t begin, end; };
  std::vector<Job> jobs;
  constexpr uint64_t CHUNK = 1 << 22;
  for (size_t i = 0; i < need.size(); ++i) {
    Tensor t;
    t.name = need[i].name;
    t.dtype = dtype;
    t.shape = need[i].shape;
    t.data = buf.get() + offsets[i];
    t.nbytes = static_cast<size_t>(t.numel()) * elem;
    for (uint64_t b = 0; b < static_cast<uint64_t>(t.numel()); b += CHUNK)
      jobs.push_back({&need[i], buf.get() + offsets[i], b, std::min<uint64_t>(b + CHUNK, t.numel())});
    w.add(std::move(t));
  }
  auto fill = [&](const Job& j) {
    float limit = limit_for(*j.spec);
    uint64_t key = name_hash(seed, j.spec->name);
    for (uint64_t k = j.begin; k < j.end; ++k) {
      float v = limit == 0.0f ? 1.0f : uniform_from(key, k, limit);
      if (dtype == DType::F32) {
        std::memcpy(j.dst + k * 4, &v, 4);
      } else {
        uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
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
