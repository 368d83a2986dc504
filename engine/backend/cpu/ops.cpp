// ops.cpp — RMSNorm, rotary embedding, SwiGLU and softmax for the CPU backend.
#include "engine/backend/cpu/ops.h"

#include <algorithm>
#include <cmath>

#include "engine/util/check.h"

#pragma GCC optimize("O3")

namespace spark::cpu {

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * (x[i] * inv);
}

void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, float eps, float* out) {
  // Two passes in double: the mean is taken out before the variance, as torch does.
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / double(n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(var / double(n) + double(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = weight[i] * static_cast<float>((x[i] - mean) * inv) + bias[i];
}

Rope::Rope(const ModelSpec& spec)
    : Rope(spec.head_dim, spec.rotary_dim > 0 ? spec.rotary_dim : spec.head_dim, spec.rope_theta, spec.rope_scaling) {}

Rope::Rope(int64_t head_dim, int64_t rotary_dim, double theta, const RopeScaling& rs)
    : head_dim_(head_dim), rotary_dim_(rotary_dim) {
  SPARK_CHECK(rotary_dim_ > 0 && rotary_dim_ % 2 == 0 && rotary_dim_ <= head_dim_,
              "rope: the rotary dimensions must be even and within head_dim");
  if (rotary_dim_ > 1024)  // apply()'s angle buffers
    throw InputError("model config: RoPE over " + std::to_string(rotary_dim_) +
                     " dimensions of a head; the CPU backend rotates at most 1024");
  const int64_t half = rotary_dim_ / 2;
  inv_freq_.resize(static_cast<size_t>(half));
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    // transformers: 1 / base ** (arange(0, dim, 2).float() / dim), all in f32, dim the
    // rotary dimensions.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rotary_dim_);
    const float p = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
    inv_freq_[static_cast<size_t>(i)] = 1.0f / p;
  }
  if (rs.type == "llama3") {
    // transformers' _compute_llama3_parameters: long wavelengths slowed by `factor`,
    // short ones kept, the band between blended smoothly.
    const float factor = static_cast<float>(rs.factor);
    const float old_ctx = static_cast<float>(rs.original_max_position_embeddings);
    const float low_wavelen = old_ctx / static_cast<float>(rs.low_freq_factor);
    const float high_wavelen = old_ctx / static_cast<float>(rs.high_freq_factor);
    const float pi = 3.14159265358979323846f;
    for (auto& f : inv_freq_) {
      const float wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f = f / factor;
      } else if (wavelen >= high_wavelen) {
        const float smooth = (old_ctx / wavelen - static_cast<float>(rs.low_freq_factor)) /
                             static_cast<float>(rs.high_freq_factor - rs.low_freq_factor);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
  } else if (rs.type == "linear") {
    position_scale_ = 1.0f / static_cast<float>(rs.factor);
  } else if (rs.type == "yarn") {
    apply_yarn(rs, base);
  } else if (rs.type == "proportional") {
    // transformers' _compute_proportional_rope_parameters: the first
    // floor(fraction * head_dim / 2) pairs keep their frequencies, the rest do not turn.
    const auto turning = static_cast<int64_t>(std::floor(rs.rotated_fraction * static_cast<double>(rotary_dim_) / 2));
    for (int64_t i = 0; i < half; ++i) {
      float& f = inv_freq_[static_cast<size_t>(i)];
      f = i < turning ? f / static_cast<float>(rs.factor) : 0.0f;
    }
  } else if (!rs.type.empty() && rs.type != "default") {
    throw InputError("rope_scaling type \"" + rs.type + "\" is not supported by the CPU backend "
                     "(supported: none, llama3, linear, yarn, proportional)");
  }
}

void Rope::apply_yarn(const RopeScaling& rs, float base) {
  // transformers' _compute_yarn_parameters: frequencies that turn fewer than beta_slow
  // times over the original context are interpolated (divided by the factor), those that
  // turn more than beta_fast times kept, a linear ramp over the dimensions between.
  const double dim = static_cast<double>(rotary_dim_);
  const double orig = static_cast<double>(rs.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(static_cast<double>(base)));
  };
  double low = correction_dim(rs.beta_fast), high = correction_dim(rs.beta_slow);
  if (rs.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  const float factor = static_cast<float>(rs.factor);
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rotary_dim_);
    const float pos_freq = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(expo)));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor * pos_freq);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    const float keep = 1.0f - ramp;
    inv_freq_[i] = interpolation * (1 - keep) + extrapolation * keep;
  }
  attention_scale_ = static_cast<float>(rs.attention_factor);
}

void Rope::apply(float* x, int64_t heads, int64_t pos) const {
  const int64_t half = rotary_dim_ / 2;
  // Angles for this position once, shared by all heads.
  float cos_v[512], sin_v[512];
  SPARK_CHECK(half <= 512, "rope: head_dim too large");
  const float p = static_cast<float>(pos) * position_scale_;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = p * inv_freq_[static_cast<size_t>(i)];
    cos_v[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * attention_scale_;
    sin_v[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * attention_scale_;
  }
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * head_dim_;
    for (int64_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos_v[i] - b * sin_v[i];
      v[i + half] = b * cos_v[i] + a * sin_v[i];
    }
  }
}

void clamped_swiglu(const float* gate, const float* up, int64_t n, float limit, float alpha, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::min(std::max(up[i], -limit), limit);
    out[i] = g / (1.0f + std::exp(-g * alpha)) * (u + 1.0f);
  }
}

void relu2(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float r = x[i] > 0 ? x[i] : 0.0f;
    out[i] = r * r;
  }
}

void gelu(const float* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  // torch's gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
  const float k = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x))) * up[i];
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void softmax(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace spark::cpu
