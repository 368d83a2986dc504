// dummy.h — load_format = "dummy": random weights from the config alone, for benchmarks.
#pragma once
#include <cstdint>

#include "engine/model/arch.h"
#include "engine/model/load_quantization.h"
#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark {

// Allocates every tensor `range` needs, each in dummy_tensor_dtype(spec, tensor, dtype)
// with `dtype` one of F32, F16, BF16, Q8_0, Q4_K, or F8_E4M3 for an FP8 spec (f32 scales in
// the spec's blocks, or one a row without block sizes), and fills them with deterministic
// pseudo-random values: the same spec, range, dtype and seed give the same bits on any
// machine and thread count. Scales keep activations finite and O(1) through any depth:
// norm weights are 1, projections are uniform with standard deviation 1/sqrt(fan_in) (so a
// projection roughly preserves the variance of its input), and biases and embeddings
// (hence a tied LM head) are uniform with standard deviation 0.02.
// With `quantize` ([model] quantize), the matrices it changes are made in its type (their
// values drawn as before, then quantized), as a checkpoint's would be at load.
Weights make_dummy_weights(const ModelSpec& spec, LayerRange range, DType dtype, uint64_t seed = 0,
                           const WeightQuantization& quantize = {});

// The dtype make_dummy_weights stores tensor `t` in when the weights are `dtype`: block
// formats only for matrices whose rows are whole blocks, as a GGUF file keeps them; norms
// and biases then f32, other matrices f16. FP8 as FP8 checkpoints (Qwen3-*-FP8) keep it:
// the linear layers' matrices e4m3, the embedding, LM head and router BF16, norms f32. A
// model whose quantization_config says mxfp4 (gpt-oss) has its expert matrices in MXFP4
// whatever `dtype` is, as its checkpoints ship them and as the memory plans count them.
DType dummy_tensor_dtype(const ModelSpec& spec, const TensorSpec& t, DType dtype);
// The bytes of the tensors make_dummy_weights gives for `range` (FP8's scales left out).
uint64_t dummy_weight_bytes(const ModelSpec& spec, LayerRange range, DType dtype);

// The value of element `index` of the tensor called `name` before conversion to dtype:
// uniform in [-limit, limit). Exposed so tests can check fills without a copy of the code.
float dummy_uniform(uint64_t seed, const std::string& name, uint64_t index, float limit);

}  // namespace spark
