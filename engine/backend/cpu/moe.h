// moe.h — the sparse mixture-of-experts feed-forward block (Qwen3-MoE, gpt-oss, Nemotron-H)
// on the CPU.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/tensor.h"
#include "engine/util/thread_pool.h"

namespace spark::cpu {

// How a router turns one token's logits into top_k expert ids and weights.
//   SOFTMAX_TOPK (Qwen3-MoE): softmax over all experts, the top_k largest probabilities,
//     renormalised to sum 1 when `normalize` (norm_topk_prob).
//   TOPK_SOFTMAX (gpt-oss): the top_k largest logits + bias, softmax over those k
//     (bias: [experts], or null; SOFTMAX_TOPK ignores it).
//   SIGMOID_BIAS (Nemotron-H): scores sigmoid(logits); the top_k largest score + bias
//     (the score-correction bias: it chooses, it does not weigh), weighted by their scores,
//     renormalised when `normalize` (sum + 1e-20, as transformers).
// Ties: the lower expert index first, as torch.topk orders them. ids/weights get top_k
// entries, highest score first.
enum class RouterRule : uint8_t { SOFTMAX_TOPK, TOPK_SOFTMAX, SIGMOID_BIAS };
void route_token(RouterRule rule, const float* logits, const float* bias, int64_t experts, int64_t top_k,
                 bool normalize, int32_t* ids, float* weights);

struct MoeWeights {
  const Tensor* router = nullptr;    // [experts, hidden]
  std::vector<const Tensor*> gate;   // per expert [moe_intermediate, hidden]
  std::vector<const Tensor*> up;     // per expert [moe_intermediate, hidden]
  std::vector<const Tensor*> down;   // per expert [hidden, moe_intermediate]
  int64_t top_k = 0;
  bool norm_topk_prob = false;
  // gpt-oss: a router bias, the softmax over the top_k logits only, per-expert biases on
  // every projection and the clamped SwiGLU (ops.h); null / empty / 0 otherwise.
  const Tensor* router_bias = nullptr;  // [experts]
  std::vector<const Tensor*> gate_bias, up_bias, down_bias;
  bool softmax_after_topk = false;
  float swiglu_limit = 0;  // 0: plain SwiGLU
  float swiglu_alpha = 1;
  // Nemotron-H: the sigmoid router's score-correction bias [experts] (SIGMOID_BIAS), the
  // weights' scale, and ungated relu(up x)^2 experts (no gate).
  const Tensor* score_bias = nullptr;
  float routed_scale = 1;
  bool relu2 = false;
  // Gemma 4: GELU-tanh gated experts, and each chosen expert's weight times its scale
  // ([experts], after the renormalisation); false / empty otherwise.
  bool gelu_tanh = false;
  std::vector<float> expert_scale;
};

// out[t] = sum over the top_k experts e of x[t]'s router weights p_e * down_e(act(gate_e x, up_e x))
// (down_e(relu(up_e x)^2) for relu2 experts). The weights are the router softmax over all
// experts (renormalised over the k when norm_topk_prob, then times Gemma 4's expert_scale),
// gpt-oss's softmax over the k chosen logits, or Nemotron-H's sigmoid scores times routed_scale. Tokens are grouped by
// expert so each expert's weights are read once per call.
// `route_x`: what the router reads, when not x (LatentMoE routes the hidden state and runs
// the experts on its latent projection, x).
void moe_ffn(ThreadPool& pool, const MoeWeights& w, const float* x, int64_t tokens, int64_t hidden, float* out,
             const float* route_x = nullptr);

}  // namespace spark::cpu
