// device_weights.h — a pipeline stage's tensors in device memory, laid out for the
// kernels: matrices in the compute type, BF16 or FP16, or kept packed where a kernel
// reads the format (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; q/k/v and gate/up fused into one
// matrix each, a chain of parts where their formats differ), f32 vectors.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "engine/backend/cuda/kernel_args.h"
#include "engine/model/arch.h"
#include "engine/model/load_quantization.h"
#include "engine/model/model_spec.h"
#include "engine/model/stage_weights.h"

namespace spark::cuda {

struct DeviceLayer {
  // [(heads + 2 kv_heads) * head_dim, hidden]: q rows, k rows, v rows; with an attention
  // output gate (Qwen3.5/3.6) the gate rows follow, so the rows of q, k and v stay as
  // without it (q_proj yields each head's query, then its gate: they are split at upload).
  // Without v rows where the values are the keys (Gemma 4's K = V layers).
  DeviceMatrix qkv;
  const float* qkv_bias = nullptr;  // same rows; null without attention bias
  const float* q_norm = nullptr;    // [head_dim]; null without qk_norm
  const float* k_norm = nullptr;
  const float* attn_norm = nullptr;  // [hidden]
  const float* ffn_norm = nullptr;
  // Gemma's sandwich norms on the attention's and the MLP's outputs [hidden]; null otherwise.
  const float* post_attn_norm = nullptr;
  const float* post_ffn_norm = nullptr;
  // An encoder layer (ModelSpec::encoder): its LayerNorms' biases [hidden] and its MLP's
  // biases (up [intermediate], down [hidden]); gate_up then holds the up rows only. Null otherwise.
  const float* attn_norm_bias = nullptr;
  const float* ffn_norm_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  DeviceMatrix o;        // [hidden, heads * head_dim]
  const float* o_bias = nullptr;  // [hidden] (gpt-oss), or null
  const float* sinks = nullptr;   // [heads] sink logits (gpt-oss), or null
  DeviceMatrix gate_up;  // [2 * intermediate, hidden]: gate rows, then up rows
  DeviceMatrix down;     // [hidden, intermediate]
  // An MoE layer (ModelSpec::layer_is_moe) has these instead of gate_up and down; each
  // expert's matrices are stacked as moe_experts.h reads them.
  const float* router = nullptr;  // [experts, hidden], f32: selection must not flip on rounding
  DeviceMatrix expert_gate_up;    // [experts * 2 * moe_intermediate, hidden]: per expert its gate rows, then up rows
  DeviceMatrix expert_down;      // [experts * hidden, moe_intermediate]
  // gpt-oss: the router's bias [experts], and every expert's biases stacked as its rows
  // (moe_experts.h's ExpertExtras); null otherwise.
  const float* router_bias = nullptr;
  const float* expert_gate_up_bias = nullptr;  // [experts * 2 * moe_intermediate]
  const float* expert_down_bias = nullptr;     // [experts * hidden]
  // The shared expert beside the routed ones (Qwen3.5/3.6-MoE), or none: its gate and up
  // rows, its down projection, and the one-row gate whose sigmoid scales it.
  DeviceMatrix shared_gate_up;     // [2 * shared_intermediate, hidden]
  DeviceMatrix shared_down;        // [hidden, shared_intermediate]
  DeviceMatrix shared_expert_gate; // [1, hidden]
  // A Gated DeltaNet layer (ModelSpec::layer_is_recurrent) has these instead of attention.
  DeviceMatrix lin_qkv;  // [conv_dim, hidden]
  DeviceMatrix lin_z;    // [value_dim, hidden]
  DeviceMatrix lin_b;    // [v_heads, hidden]
  DeviceMatrix lin_a;    // [v_heads, hidden]
  DeviceMatrix lin_out;  // [hidden, value_dim]
  const float* lin_conv = nullptr;       // [conv_dim * conv_kernel]
  const float* lin_neg_exp_a = nullptr;  // [v_heads]: -exp(A_log), taken at upload
  const float* lin_dt_bias = nullptr;    // [v_heads]
  const float* lin_norm = nullptr;       // [v_head_dim]: the gated norm's weight, as stored
  // A Mamba-2 layer (Nemotron-H) has these instead of attention.
  DeviceMatrix ssm_in;   // [inner + conv_dim + heads, hidden]
  DeviceMatrix ssm_out;  // [hidden, inner]
  const float* ssm_conv = nullptr;       // [conv_dim * conv_kernel]
  const float* ssm_conv_bias = nullptr;  // [conv_dim]
  const float* ssm_neg_exp_a = nullptr;  // [heads]
  const float* ssm_d = nullptr;          // [heads]
  const float* ssm_dt_bias = nullptr;    // [heads]
  const float* ssm_norm = nullptr;       // [inner]
  const float* router_score_bias = nullptr;  // [experts]: Nemotron-H's score-correction bias
  // Gemma 4: the layer's output scalar [1]; in its MoE block, beside gate_up and down (the
  // dense MLP), the experts' input norm, the MLP's and the experts' output norms [hidden],
  // the router's norm weight (its input scale / sqrt(hidden)) [hidden] and per-expert
  // scales [experts]. Null otherwise.
  const float* layer_scalar = nullptr;
  const float* moe_norm = nullptr;
  const float* post_mlp_norm = nullptr;
  const float* post_moe_norm = nullptr;
  const float* router_norm = nullptr;
  const float* expert_scale = nullptr;
  DeviceMatrix moe_latent_in;   // [latent, hidden]: LatentMoE's way into the experts (Nemotron-3-Super)
  DeviceMatrix moe_latent_out;  // [hidden, latent]
};

class DeviceWeights {
 public:
  // Checks every tensor's dtype (InputError naming it), then allocates
  // bytes(spec, stage.range, ...) once and uploads: a matrix whose parts are all in packed
  // formats (whole blocks) stays packed (see DeviceMatrix); any other matrix is converted
  // to `type` (a tensor already in `type` is copied as is); vectors to f32 (zero-centred
  // norms as 1 + w, ModelSpec::norm_plus_one; A_log as -exp(A_log)). The matrices
  // `quantize` changes ([model] quantize) are packed as Q8_0 or FP8, quantized on the way.
  DeviceWeights(const ModelSpec& spec, const StageWeights& stage, HalfType type,
                const WeightQuantization& quantize = {});
  ~DeviceWeights();
  DeviceWeights(const DeviceWeights&) = delete;
  DeviceWeights& operator=(const DeviceWeights&) = delete;

  // Device bytes the tensors of `range` take as laid out (packed matrices at their packed
  // size, the dequantization scratch included; both 16-bit types take the same).
  static uint64_t bytes(const ModelSpec& spec, LayerRange range, const StoredDType& stored);
  // Of those, the bytes a batch-1 decode step reads: every matrix but the embedding (one
  // row a token; all of it when it is also the LM head), and of an MoE layer the router
  // and top_k of its experts. The batch-1 rate is bounded by bandwidth / this.
  static uint64_t bytes_per_token(const ModelSpec& spec, LayerRange range, const StoredDType& stored);

  HalfType type = HalfType::BF16;
  DeviceMatrix embedding;             // [vocab, hidden]; no data unless the stage holds layer 0
  DeviceMatrix lm_head;               // [vocab, hidden]; the embedding when tied
  const float* final_norm = nullptr;  // [hidden]; null unless the stage holds the last layer
  // An MTP head's input (ModelSpec::mtp_head, mtp_input.h); no data otherwise.
  DeviceMatrix mtp_fc;                     // [hidden, 2 * hidden]: over [normed embedding; normed hidden]
  const float* mtp_embed_norm = nullptr;   // [hidden], as used (1 + w for zero-centred norms)
  const float* mtp_hidden_norm = nullptr;  // [hidden]
  // Gemma 4's assistant (ModelSpec::assistant_of_hidden, W its model's width): its input
  // over [the model's scaled embedding; a hidden state], its hidden state back out in the
  // model's width, and its clusters' centroids (no data without clusters). TOKEN_ORDERING
  // is the backend's (as each token's cluster).
  DeviceMatrix assist_in;   // [hidden, 2 W]
  DeviceMatrix assist_out;  // [W, hidden]
  DeviceMatrix centroids;   // [num_centroids, hidden]
  // An encoder's input (ModelSpec::encoder, embedding.h), when the stage holds layer 0; null
  // otherwise. f32: the position table is small beside the token table ([position_rows,
  // hidden]), and a row is read once a token.
  const float* pos_embedding = nullptr;   // [position_rows, hidden]
  const float* type_embedding = nullptr;  // [type_vocab_size, hidden]; null without token types
  const float* embed_norm = nullptr;      // [hidden]
  const float* embed_norm_bias = nullptr;
  std::vector<DeviceLayer> layers;

 private:
  void* arena_ = nullptr;
  std::deque<DeviceMatrix> tails_;  // the second and later parts of chained matrices
  std::deque<Tensor> row_views_;    // ranges of rows of the stage's tensors (the split q_proj)
};

}  // namespace spark::cuda
