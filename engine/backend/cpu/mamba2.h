// mamba2.h — the Mamba-2 token mixer of Nemotron-H on the CPU: in_proj to z, x|B|C and dt;
// the depthwise causal conv1d (with bias, SiLU) over x|B|C with its carried state; per
// head the selective state update on a head_dim x state_size state; D's skip; the RMSNorm
// over each group of y * silu(z); out_proj. Prefill and decode both run the exact
// one-token recurrence, token after token (the chunked SSD scan computes the same sums in
// another order): this is the reference GPU kernels are held to.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/tensor.h"
#include "engine/step/step.h"
#include "engine/util/thread_pool.h"

namespace spark::cpu {

struct Mamba2Weights {
  const Tensor* in_proj = nullptr;  // [inner + conv_dim + heads, hidden]: z, then x|B|C, then dt
  const Tensor* out = nullptr;      // [hidden, inner]
  std::vector<float> conv;          // [conv_dim x conv_kernel], the newest input's tap last
  std::vector<float> conv_bias;     // [conv_dim], or empty
  std::vector<float> neg_exp_a;     // [heads]: A = -exp(A_log)
  std::vector<float> d;             // [heads]: the skip's scale
  std::vector<float> dt_bias;       // [heads]
  std::vector<float> norm;          // [inner]: the grouped gated norm's weight
};

// Activations of one call, grown to the largest batch and reused.
struct Mamba2Scratch {
  std::vector<float> proj, conv_out, y;
};

// One layer over the batch: `x` [T, hidden] is the normed input, `out` [T, hidden]
// receives the layer's output. Sequence s of the batch reads and updates the state at
// states[s] (Mamba2::state_values() floats: the conv state, then the per-head matrices);
// a fresh sequence's state must be zero.
void mamba2(ThreadPool& pool, const ModelSpec::Mamba2& shape, const Mamba2Weights& w, float eps, const Batch& batch,
            const std::vector<float*>& states, const float* x, Mamba2Scratch& scratch, float* out);

}  // namespace spark::cpu
