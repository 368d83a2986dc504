// model_parity.h — what the whole-model checks (check_model, check_sliding_kv) share: the
// logits limits of the CUDA backend against the CPU backend, and the BF16-rounded
// matrices the CPU reference takes for models whose routing flips on rounding.
#pragma once
#include <cuda_bf16.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/model/arch.h"
#include "engine/model/model_loader.h"

namespace spark::gpu_check {

// Whole-model logits limits per activation dtype: FP16 keeps 10 mantissa bits and measured
// 4e-4 to 1.3e-3 here, so 3e-3 leaves headroom without hiding a broken kernel; BF16 keeps 7
// bits (8x coarser) and keeps the earlier 2e-2.
inline constexpr double kLogitsLimitF16 = 3e-3;
inline constexpr double kLogitsLimitBF16 = 2e-2;

// The f32 matrices rounded to BF16 as the device stores them (the router stays f32 on
// both backends), so a CPU reference given them differs only by the activations' rounding.
inline LoadedModel with_bf16_matrices(LoadedModel m) {
  std::set<std::string> routers;
  for (int64_t l = 0; l < m.info.spec.num_layers; ++l) routers.insert(tensor_name(Part::ROUTER, l));
  Weights rounded;
  for (const auto& [name, t] : m.weights.all()) {
    if (t.dtype != DType::F32 || t.shape.size() < 2 || routers.count(name)) {
      rounded.add(t);
      continue;
    }
    auto values = std::make_shared<std::vector<float>>(static_cast<const float*>(t.data),
                                                       static_cast<const float*>(t.data) + t.numel());
    for (float& v : *values) v = __bfloat162float(__float2bfloat16(v));
    Tensor r = t;
    r.data = values->data();
    rounded.add(r);
    rounded.keep_alive(values);
  }
  rounded.set_range(m.weights.range());
  rounded.keep_alive(std::make_shared<Weights>(std::move(m.weights)));
  m.weights = std::move(rounded);
  return m;
}

}  // namespace spark::gpu_check
