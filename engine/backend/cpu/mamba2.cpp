// mamba2.cpp — the Mamba-2 token mixer, token by token (mamba2.h).
#include "engine/backend/cpu/mamba2.h"

#include <algorithm>
#include <cmath>

#include "engine/backend/cpu/causal_conv.h"
#include "engine/backend/cpu/matmul.h"
#include "engine/util/check.h"

namespace spark::cpu {

namespace {

float silu(float v) { return v / (1.0f + std::exp(-v)); }
// torch's softplus (threshold 20: linear above it).
float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

template <typename T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

void mamba2(ThreadPool& pool, const ModelSpec::Mamba2& m, const Mamba2Weights& w, float eps, const Batch& batch,
            const std::vector<float*>& states, const float* x, Mamba2Scratch& s, float* out) {
  const int64_t T = batch.num_tokens(), S = batch.num_seqs();
  SPARK_CHECK(static_cast<int64_t>(states.size()) == S, "mamba2: one state per sequence");
  const int64_t inner = m.inner(), C = m.conv_dim(), K = m.conv_kernel, P = m.in_proj_rows();
  const int64_t heads = m.num_heads, hd = m.head_dim, N = m.state_size, G = m.n_groups;
  const int64_t heads_per_group = heads / G, group_size = inner / G;
  grow(s.proj, size_t(T * P));
  grow(s.conv_out, size_t(T * C));
  grow(s.y, size_t(T * inner));
  matmul(pool, x, T, *w.in_proj, s.proj.data());

  // The causal conv1d over x|B|C (in_proj's columns inner .. inner + conv_dim), carrying
  // the last K - 1 inputs in the state.
  causal_conv1d_silu(pool, batch, states, w.conv.data(), w.conv_bias.empty() ? nullptr : w.conv_bias.data(), C, K,
                     s.proj.data(), P, inner, s.conv_out.data());

  // The selective state update, per (sequence, head), token after token:
  //   dt = clamp(softplus(dt + dt_bias));  S = S exp(dt A) + dt x B^T;  y = S C + D x
  // with x the head's channels and B, C its group's.
  const int64_t conv_state = C * (K - 1);
  pool.parallel_for(S * heads, 1, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t seq = j / heads, h = j % heads, g = h / heads_per_group;
      float* M = states[size_t(seq)] + conv_state + h * hd * N;  // [hd][N]
      for (int64_t r = batch.query_start[size_t(seq)]; r < batch.query_start[size_t(seq) + 1]; ++r) {
        const float* row = s.conv_out.data() + r * C;
        const float* xh = row + h * hd;
        const float* B = row + inner + g * N;
        const float* Cg = row + inner + G * N + g * N;
        float dt = softplus(s.proj[size_t(r * P + inner + C + h)] + w.dt_bias[size_t(h)]);
        dt = std::max(dt, float(m.dt_min));
        if (m.dt_max > 0) dt = std::min(dt, float(m.dt_max));
        const float decay = std::exp(dt * w.neg_exp_a[size_t(h)]);
        float* y = s.y.data() + r * inner + h * hd;
        for (int64_t p = 0; p < hd; ++p) {
          float* row_p = M + p * N;
          const float dx = dt * xh[p];
          float acc = 0;
          for (int64_t n = 0; n < N; ++n) {
            row_p[n] = row_p[n] * decay + dx * B[n];
            acc += row_p[n] * Cg[n];
          }
          y[p] = acc + w.d[size_t(h)] * xh[p];
        }
      }
    }
  });

  // The gated norm over groups: rms_norm(y * silu(z)) per group of inner / n_groups
  // channels, times the weight.
  pool.parallel_for(T, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* y = s.y.data() + t * inner;
      const float* z = s.proj.data() + t * P;
      for (int64_t i = 0; i < inner; ++i) y[i] *= silu(z[i]);
      for (int64_t g = 0; g < G; ++g) {
        float* v = y + g * group_size;
        double ss = 0;
        for (int64_t i = 0; i < group_size; ++i) ss += double(v[i]) * v[i];
        const float inv = 1.0f / std::sqrt(float(ss / double(group_size)) + eps);
        for (int64_t i = 0; i < group_size; ++i) v[i] = v[i] * inv * w.norm[size_t(g * group_size + i)];
      }
    }
  });
  matmul(pool, s.y.data(), T, *w.out, out);
}

}  // namespace spark::cpu
