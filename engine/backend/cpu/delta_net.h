// delta_net.h — the Gated DeltaNet token mixer of the hybrid models (Qwen3.5/3.6) on the
// CPU: the q/k/v, z, b and a projections, the depthwise causal conv1d (SiLU) with its
// carried state, L2-normalised q and k, and per value head the gated delta rule on a
// k_head_dim x v_head_dim state, then the gated RMSNorm and the output projection.
// Prefill and decode both run the exact one-token recurrence, token after token: this is
// the reference the chunked GPU kernels are held to.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/tensor.h"
#include "engine/step/step.h"
#include "engine/util/thread_pool.h"

namespace spark::cpu {

struct DeltaNetWeights {
  const Tensor* qkv = nullptr;  // [conv_dim, hidden]: q, then k, then v channels
  const Tensor* z = nullptr;    // [value_dim, hidden]: the output gate
  const Tensor* b = nullptr;    // [v_heads, hidden]: beta = sigmoid(b x)
  const Tensor* a = nullptr;    // [v_heads, hidden]: the decay's input
  const Tensor* out = nullptr;  // [hidden, value_dim]
  std::vector<float> conv;      // [conv_dim x conv_kernel], the newest input's tap last
  std::vector<float> neg_exp_a; // [v_heads]: -exp(A_log)
  std::vector<float> dt_bias;   // [v_heads]
  std::vector<float> norm;      // [v_head_dim]: the gated RMSNorm's weight
};

// Activations of one call, grown to the largest batch and reused.
struct DeltaNetScratch {
  std::vector<float> qkv, conv_out, z, b, a, core;
};

// One layer over the batch: `x` [T, hidden] is the normed input, `out` [T, hidden]
// receives the layer's output. Sequence s of the batch reads and updates the state at
// states[s] (DeltaNet::state_values() floats: the conv state, then the recurrent
// matrices); a fresh sequence's state must be zero.
void delta_net(ThreadPool& pool, const ModelSpec::DeltaNet& shape, const DeltaNetWeights& w, float eps,
               const Batch& batch, const std::vector<float*>& states, const float* x, DeltaNetScratch& scratch,
               float* out);

}  // namespace spark::cpu
