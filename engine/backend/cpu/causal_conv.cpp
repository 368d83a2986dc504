// causal_conv.cpp — the hybrids' depthwise causal conv1d with SiLU (causal_conv.h).
#include "engine/backend/cpu/causal_conv.h"

#include <algorithm>
#include <cmath>

namespace spark::cpu {

void causal_conv1d_silu(ThreadPool& pool, const Batch& batch, const std::vector<float*>& states, const float* taps,
                        const float* bias, int64_t channels, int64_t kernel, const float* in, int64_t in_stride,
                        int64_t in_offset, float* out) {
  const int64_t K = kernel, S = batch.num_seqs();
  pool.parallel_for(channels, 64, [&](int64_t c0, int64_t c1) {
    std::vector<float> window(static_cast<size_t>(K));
    for (int64_t seq = 0; seq < S; ++seq) {
      float* state = states[size_t(seq)];
      const int64_t r0 = batch.query_start[size_t(seq)], r1 = batch.query_start[size_t(seq) + 1];
      for (int64_t c = c0; c < c1; ++c) {
        float* hist = state + c * (K - 1);
        const float* tap = taps + c * K;
        for (int64_t r = r0; r < r1; ++r) {
          std::copy(hist, hist + K - 1, window.begin());
          window[size_t(K - 1)] = in[r * in_stride + in_offset + c];
          float acc = bias ? bias[c] : 0.0f;
          for (int64_t k = 0; k < K; ++k) acc += tap[k] * window[size_t(k)];
          out[r * channels + c] = acc * (1.0f / (1.0f + std::exp(-acc)));  // silu
          std::copy(window.begin() + 1, window.end(), hist);
        }
      }
    }
  });
}

}  // namespace spark::cpu
