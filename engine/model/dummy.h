// dummy.h — load_format = "dummy": random weights from the config alone, for benchmarks.
#pragma once
#include <cstdint>

#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark {

// Allocates every tensor `range` needs in `dtype` (F32, F16, BF16, or Q8_0 / Q4_K for the
// matrices whose rows are whole blocks, norms and biases then f32, as in a GGUF file; or
// F8_E4M3 for an FP8 spec: e4m3 linear layers with f32 scales in the spec's blocks, or one
// a row without block sizes, the embedding, LM head and router BF16, as an FP8 checkpoint) and
// fills it with deterministic pseudo-random values: the same spec, range, dtype and seed
// give the same bits on any machine and thread count. Scales keep activations finite and O(1) through
// any depth: norm weights are 1, projections are uniform with standard deviation
// 1/sqrt(fan_in) (so a projection roughly preserves the variance of its input), and
// biases and embeddings (hence a tied LM head) are uniform with standard deviation 0.02.
Weights make_dummy_weights(const ModelSpec& spec, LayerRange range, DType dtype, uint64_t seed = 0);

// The value of element `index` of the tensor called `name` before conversion to dtype:
// uniform in [-limit, limit). Exposed so tests can check fills without a copy of the code.
float dummy_uniform(uint64_t seed, const std::string& name, uint64_t index, float limit);

}  // namespace spark
