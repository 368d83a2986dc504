// delta_net.cpp — the Gated DeltaNet token mixer, token by token (delta_net.h).
#include "engine/backend/cpu/delta_net.h"

#include <algorithm>
#include <cmath>

#include "engine/backend/cpu/causal_conv.h"
#include "engine/backend/cpu/matmul.h"
#include "engine/util/check.h"

namespace spark::cpu {

namespace {

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
float silu(float v) { return v * sigmoid(v); }
// torch's softplus (threshold 20: linear above it).
float softplus(float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); }

template <typename T>
void grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// x / sqrt(sum x^2 + 1e-6), as the reference normalises q and k.
void l2_normalize(float* v, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(v[i]) * v[i];
  const float inv = 1.0f / std::sqrt(float(ss) + 1e-6f);
  for (int64_t i = 0; i < n; ++i) v[i] *= inv;
}

}  // namespace

void delta_net(ThreadPool& pool, const ModelSpec::DeltaNet& d, const DeltaNetWeights& w, float eps,
               const Batch& batch, const std::vector<float*>& states, const float* x, DeltaNetScratch& s,
               float* out) {
  const int64_t T = batch.num_tokens(), S = batch.num_seqs();
  SPARK_CHECK(static_cast<int64_t>(states.size()) == S, "delta_net: one state per sequence");
  const int64_t C = d.conv_dim(), K = d.conv_kernel, Hv = d.num_v_heads, dk = d.k_head_dim, dv = d.v_head_dim;
  const int64_t key_dim = d.key_dim(), value_dim = d.value_dim(), heads_per_key = Hv / d.num_k_heads;
  grow(s.qkv, size_t(T * C));
  grow(s.conv_out, size_t(T * C));
  grow(s.z, size_t(T * value_dim));
  grow(s.b, size_t(T * Hv));
  grow(s.a, size_t(T * Hv));
  grow(s.core, size_t(T * value_dim));
  matmul_many(pool, x, T, {{w.qkv, s.qkv.data()}, {w.z, s.z.data()}, {w.b, s.b.data()}, {w.a, s.a.data()}});

  // The causal conv1d over q|k|v, carrying the last K - 1 inputs in the state.
  const int64_t conv_state = C * (K - 1);
  causal_conv1d_silu(pool, batch, states, w.conv.data(), nullptr, C, K, s.qkv.data(), C, 0, s.conv_out.data());

  // q and k L2-normalised per head (q also scaled by 1/sqrt(dk)).
  const float q_scale = 1.0f / std::sqrt(float(dk));
  pool.parallel_for(T, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* row = s.conv_out.data() + t * C;
      for (int64_t h = 0; h < d.num_k_heads; ++h) {
        float* q = row + h * dk;
        l2_normalize(q, dk);
        for (int64_t i = 0; i < dk; ++i) q[i] *= q_scale;
        l2_normalize(row + key_dim + h * dk, dk);
      }
    }
  });

  // The gated delta rule, per (sequence, value head), token after token:
  //   S *= exp(g);  S += k (beta (v - S^T k))^T;  o = S^T q
  // with g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b).
  pool.parallel_for(S * Hv, 1, [&](int64_t j0, int64_t j1) {
    std::vector<float> kv(static_cast<size_t>(dv));
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t seq = j / Hv, h = j % Hv, kh = d.value_heads_tiled ? h % d.num_k_heads : h / heads_per_key;
      float* M = states[size_t(seq)] + conv_state + h * dk * dv;  // [dk][dv]
      for (int64_t r = batch.query_start[size_t(seq)]; r < batch.query_start[size_t(seq) + 1]; ++r) {
        const float* row = s.conv_out.data() + r * C;
        const float* q = row + kh * dk;
        const float* k = row + key_dim + kh * dk;
        const float* v = row + 2 * key_dim + h * dv;
        const float decay = std::exp(w.neg_exp_a[size_t(h)] * softplus(s.a[size_t(r * Hv + h)] + w.dt_bias[size_t(h)]));
        const float beta = sigmoid(s.b[size_t(r * Hv + h)]);
        std::fill(kv.begin(), kv.end(), 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* m = M + i * dv;
          for (int64_t c = 0; c < dv; ++c) {
            m[c] *= decay;
            kv[size_t(c)] += m[c] * k[i];
          }
        }
        for (int64_t c = 0; c < dv; ++c) kv[size_t(c)] = (v[c] - kv[size_t(c)]) * beta;  // the delta
        float* o = s.core.data() + r * value_dim + h * dv;
        std::fill(o, o + dv, 0.0f);
        for (int64_t i = 0; i < dk; ++i) {
          float* m = M + i * dv;
          for (int64_t c = 0; c < dv; ++c) {
            m[c] += k[i] * kv[size_t(c)];
            o[c] += m[c] * q[i];
          }
        }
      }
    }
  });

  // The gated RMSNorm per value head: norm(o) * w * silu(z).
  pool.parallel_for(T, 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t h = 0; h < Hv; ++h) {
        float* o = s.core.data() + t * value_dim + h * dv;
        const float* z = s.z.data() + t * value_dim + h * dv;
        double ss = 0;
        for (int64_t c = 0; c < dv; ++c) ss += double(o[c]) * o[c];
        const float inv = 1.0f / std::sqrt(float(ss / double(dv)) + eps);
        for (int64_t c = 0; c < dv; ++c) o[c] = o[c] * inv * w.norm[size_t(c)] * silu(z[c]);
      }
  });
  matmul(pool, s.core.data(), T, *w.out, out);
}

}  // namespace spark::cpu
