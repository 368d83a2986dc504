// ops.h — the element-wise and per-row operations of a layer on the CPU: RMSNorm, LayerNorm, rotary embedding (HF rotate_half convention; llama3, linear and YaRN scaling),
// SwiGLU and gpt-oss's clamped variant, GELU, softmax.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/model_spec.h"

namespace spark::cpu {

// out = x / sqrt(mean(x²) + eps) * weight over n values; out may alias x.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);
// out = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias over n values (encoders); out may alias x.
void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, float eps, float* out);

// The rotary frequencies of a model (rope_theta, head_dim and rope_scaling), computed in
// f32 the way transformers does so angles agree with the reference bit for bit at small
// positions.
class Rope {
 public:
  Rope() = default;
  explicit Rope(const ModelSpec& spec);
  // The same for a layer with its own base and scaling (LayerShape::rope_theta, rope_scaling).
  Rope(int64_t head_dim, int64_t rotary_dim, double theta, const RopeScaling& scaling);
  // Rotates the first and second halves of the first rotary_dim values (ModelSpec::rotary_dim;
  // all of them by default) of each of `heads` vectors of head_dim values starting at x
  // (stride head_dim) for position `pos`.
  void apply(float* x, int64_t heads, int64_t pos) const;
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  float position_scale() const { return position_scale_; }
  float attention_scale() const { return attention_scale_; }

 private:
  void apply_yarn(const RopeScaling& rs, float base);

  int64_t head_dim_ = 0;
  int64_t rotary_dim_ = 0;
  float position_scale_ = 1.0f;   // linear scaling divides positions by its factor
  float attention_scale_ = 1.0f;  // YaRN multiplies cos and sin by its attention factor
  std::vector<float> inv_freq_;  // [rotary_dim / 2]
};

// out[i] = silu(gate[i]) * up[i] for n values; out may alias gate.
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
// out[i] = gelu_tanh(gate[i]) * up[i], GELU's tanh approximation (Gemma's MLP); out may alias gate.
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);
// out[i] = relu(x[i])^2 (Nemotron-H's ungated feed-forwards); out may alias x.
void relu2(const float* x, int64_t n, float* out);
// out[i] = x[i] * Phi(x[i]), the exact (erf) GELU of encoders; out may alias x.
void gelu(const float* x, int64_t n, float* out);

// gpt-oss's expert activation: gate clamped above at `limit`, up to [-limit, limit],
// out = gate * sigmoid(alpha * gate) * (up + 1); out may alias gate.
void clamped_swiglu(const float* gate, const float* up, int64_t n, float limit, float alpha, float* out);

// In-place softmax of n values.
void softmax(float* x, int64_t n);

}  // namespace spark::cpu
