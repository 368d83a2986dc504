// f32_scale.h — f32 values scaled in place: the embedding's normalizer (x * s, Gemma's
// sqrt(hidden_size)), Gemma 4's per-layer output scalar, and the final logits' soft cap
// (tanh(x / cap) * cap, Gemma's final_logit_softcapping).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace spark::cuda {

// x[i] *= s for i < n.
void scale_f32(float* x, int64_t n, float s, cudaStream_t stream);

// x[i] = (x[i] + delta[i]) * s[0] for i < n, delta null: x[i] * s[0]; s in device memory
// (a weight). The residual stream's last add of a layer, and its scalar.
void add_scale_f32(float* x, const float* delta, int64_t n, const float* s, cudaStream_t stream,
                   bool programmatic = false);

// x[i] = tanhf(x[i] / cap) * cap for i < n, as the CPU backend caps its logits.
void softcap_f32(float* x, int64_t n, float cap, cudaStream_t stream);

}  // namespace spark::cuda
