// step_buffers.h — the CUDA backend's device memory for one step: the activation buffers
// of the largest step the options allow, carved out of one allocation, and the batch's
// index arrays at fixed offsets (a captured graph reads the current step's values there),
// with the model facts their sizes follow.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/moe.h"
#include "engine/model/model_spec.h"

namespace spark::cuda {

inline constexpr size_t kStepAlign = 256;

inline size_t aligned(size_t bytes) { return (bytes + kStepAlign - 1) / kStepAlign * kStepAlign; }

// The activation buffers of the largest step, carved out of one allocation. Buffers
// whose lives do not overlap share memory: the qkv output is consumed (rope) before
// gate/up is produced, the attention output (o_proj) before the SwiGLU output.
// The 16-bit buffers are `void*` in the compute type (BF16 or FP16). The projections that
// feed the residual stream write f32: a llama-family model's few massive activations come
// out of a down projection and can exceed FP16's range.
struct Activations {
  float* x = nullptr;         // [T, H] f32 residual stream
  void* normed = nullptr;     // [T, H] RMSNorm output, GEMM input
  // [T, max(qkv, 2 I)]; an MTP head's normed [embedding; hidden] pairs [T, 2 H] before its layer (mtp_input.h)
  void* wide = nullptr;
  void* q = nullptr;          // [T, heads * head_dim] roped queries
  // [T, max(heads * head_dim, I, ...)]: attention or recurrent mixer output, then the MLP's
  // activation (and LatentMoE's sum, rounded for latent_out)
  void* mid = nullptr;
  float* proj = nullptr;      // [T, H] f32 o_proj / down_proj output, added to x by the next norm;
                              // an MTP head's hidden_in rows before its layer (mtp_input.h); an
                              // encoder's position rows before its first layer (embedding.h)
  void* head_in = nullptr;    // [R, H] final-normed rows for the LM head
  float* logits = nullptr;    // [R, vocab]
  float* inv_freq = nullptr;  // [rope_tables, widest_head / 2]: each RoPE table the layers use
  int32_t* ints = nullptr;    // the batch's index arrays (BatchLayout)
  void* moe = nullptr;        // MoeScratch, when the stage holds an MoE layer
  // f32 scratch of the hybrids' layers: a DeltaNet layer's q/k/v, z, b and a projections
  // ([T, conv_dim], [T, value_dim], [T, v_heads] twice), a Mamba-2 layer's in_proj output
  // [T, inner + conv_dim + heads], the shared expert's output [T, H] and gate logits [T],
  // or LatentMoE's weighted sum [T, latent].
  float* aux = nullptr;
  // [T, H] BF16 hidden states a pipeline stage sends or receives. BF16 whatever the compute
  // type: x is f32 because massive activations can exceed FP16's range, and so can this.
  void* boundary = nullptr;
};

// Where each index array of a step lives, at fixed offsets so that a captured graph
// reads the current step's values.
struct BatchLayout {
  int64_t tokens = 0, positions = 0, slots = 0, query_start = 0, context_lens = 0, block_tables = 0, logits_rows = 0;
  int64_t state_slots = 0, state_query_start = 0;
  int64_t total = 0;
  BatchLayout(int64_t max_tokens, int64_t max_seqs, int64_t stride, int64_t max_rows) {
    positions = max_tokens;
    slots = 2 * max_tokens;
    query_start = 3 * max_tokens;
    context_lens = query_start + max_seqs + 1;
    block_tables = context_lens + max_seqs;
    logits_rows = block_tables + max_seqs * stride;
    state_slots = logits_rows + max_rows;
    state_query_start = state_slots + max_seqs;
    total = state_query_start + max_seqs + 1;
  }
};

// The MoE block's shape and rule (Qwen3-MoE: softmax, top-k, renormalised by
// norm_topk_prob; gpt-oss: top-k of the biased logits, then softmax over those k;
// Nemotron-H: sigmoid scores chosen with their correction bias, times
// routed_scaling_factor, ungated squared-ReLU experts, which LatentMoE runs on
// moe_latent_size wide vectors while the router reads hidden_size wide rows).
inline MoeConfig moe_config(const ModelSpec& s) {
  MoeConfig c;
  const int64_t expert_width = s.moe_latent_size > 0 ? s.moe_latent_size : s.hidden_size;
  c.shape = {int32_t(s.num_experts), int32_t(expert_width), int32_t(s.moe_intermediate_size), !s.relu2_mlp};
  c.top_k = int32_t(s.num_experts_per_tok);
  c.rule = s.gptoss_moe       ? RouterRule::TOPK_SOFTMAX
           : s.sigmoid_router ? RouterRule::SIGMOID_BIAS
                              : RouterRule::SOFTMAX_TOPK;
  c.normalize = s.norm_topk_prob && !s.gptoss_moe;
  c.routed_scale = float(s.routed_scaling_factor);  // 1 but for Nemotron-H; the CPU backend applies it to every rule
  c.router_hidden = int32_t(s.hidden_size);
  return c;
}

// The MoE chunk (moe.h's MoeScratch): a step of the plan's largest size in one pass over
// the experts, up to MoeScratch::kMaxChunkTokens.
inline int32_t moe_chunk_tokens(int64_t max_tokens) {
  return int32_t(std::clamp<int64_t>(max_tokens, 1, MoeScratch::kMaxChunkTokens));
}

// Whether a layer of `r` is one `is` names (ModelSpec::layer_is_moe, layer_is_recurrent).
inline bool range_has(const ModelSpec& s, LayerRange r, bool (ModelSpec::*is)(int64_t) const) {
  for (int64_t l = r.first_layer; l < r.last_layer; ++l)
    if ((s.*is)(l)) return true;
  return false;
}

// The fused q/k/v projection's width, the widest layer's: with an output gate, the gates follow v.
inline int64_t qkv_width(const ModelSpec& s) {
  int64_t width = 0;
  for (int64_t l = 0; l < s.num_layers; ++l)
    width = std::max(width, (s.num_heads * (s.attn_output_gate ? 2 : 1) + 2 * s.layer_num_kv_heads(l)) * s.layer_head_dim(l));
  return width;
}

// RoPE frequency tables a model's layers use: one, or (Gemma 3 and 4) another for the sliding layers.
inline int64_t rope_tables(const ModelSpec& s) { return s.sliding_rope ? 2 : 1; }

// The widest attention head of the model's layers (Gemma 4's full layers: 512).
inline int64_t widest_head(const ModelSpec& s) { return std::max(s.head_dim, s.full_head_dim); }

struct Sizes {
  int64_t max_tokens, max_seqs, max_rows, stride;
  size_t x, normed, wide, q, mid, proj, head_in, logits, inv_freq, ints, moe, aux, boundary;
  Sizes(const ModelSpec& s, const CudaOptions& o, int64_t largest_bucket, LayerRange range) {
    // An encoder's last stage returns its raw rows (no final norm, no LM head: no head_in or logits).
    const bool last = range.last_layer == s.num_layers, has_head = last && !s.encoder,
               whole = last && range.first_layer == 0;
    max_seqs = std::max<int64_t>(o.max_num_seqs, largest_bucket);
    max_tokens = std::max<int64_t>(o.max_num_batched_tokens, max_seqs);
    max_rows = max_seqs;
    stride = (o.max_model_len + o.block_size - 1) / o.block_size;
    // The widest layer's queries (Gemma 4's full layers have wider heads).
    const int64_t H = s.hidden_size, qd = s.num_heads * widest_head(s);
    // A dense MLP's width, when the range holds one (Qwen3-30B-A3B's config names an
    // intermediate_size that none of its all-MoE layers uses).
    bool any_dense = false;
    for (int64_t l = range.first_layer; l < range.last_layer; ++l) any_dense = any_dense || !s.layer_is_moe(l);
    const int64_t I = any_dense ? s.intermediate_size : 0;
    const bool moe_here = range_has(s, range, &ModelSpec::layer_is_moe),
               recurrent = range_has(s, range, &ModelSpec::layer_is_recurrent);
    const int64_t shared_i = moe_here ? s.shared_expert_intermediate_size : 0;
    const ModelSpec::DeltaNet& d = s.delta_net;
    const ModelSpec::Mamba2& mb = s.mamba2;
    const bool mamba = recurrent && s.mamba2_layers(), delta = recurrent && !mamba;
    const int64_t value_dim = delta ? d.value_dim() : 0, inner = mamba ? mb.inner() : 0;
    const int64_t latent = moe_here ? s.moe_latent_size : 0;  // LatentMoE's width (layer_forward.cu)
    // Gemma 4's assistant (cuda_backend.cu): its input pair of 2 W values a row (W its
    // model's width) in T, and in f32 beside the embedded rows; its hidden state out (W a
    // row); its clusters' scores.
    const int64_t assist = s.assistant_of_hidden;
    x = aligned(size_t(max_tokens * H) * 4);
    normed = aligned(size_t(max_tokens * H) * 2);
    // A fused gate/up output is 2 I wide; an encoder's MLP has no gate and writes mid.
    const int64_t gate_up = s.encoder ? 0 : 2 * I;
    wide = aligned(
        size_t(max_tokens * std::max({qkv_width(s), gate_up, 2 * shared_i, s.mtp_head ? 2 * H : 0, latent, 2 * assist})) *
        2);
    q = aligned(size_t(max_tokens * qd) * 2);
    mid = aligned(size_t(max_tokens * std::max({qd, I, shared_i, value_dim, inner, latent})) * 2);
    // f32 scratch: a DeltaNet layer's four projections, a Mamba-2 layer's in_proj, the
    // shared expert's output and gate logit, LatentMoE's weighted sum, a block's output
    // through Gemma's sandwich norm, Gemma 4's MoE block's two normed outputs.
    const int64_t aux_values = std::max({delta ? d.conv_dim() + value_dim + 2 * d.num_v_heads : 0,
                                         mamba ? mb.in_proj_rows() : 0, shared_i > 0 ? H + 1 : 0, latent,
                                         s.sandwich_norms ? H : 0, moe_here && s.moe_beside_mlp ? 2 * H : 0,
                                         3 * assist, s.num_centroids});
    aux = aligned(size_t(max_tokens * aux_values) * 4);
    proj = aligned(size_t(max_tokens * H) * 4);
    head_in = has_head ? aligned(size_t(max_rows * H) * 2) : 0;
    logits = has_head ? aligned(size_t(max_rows * s.vocab_size) * 4) : 0;
    inv_freq = aligned(size_t(widest_head(s) / 2) * 4 * size_t(rope_tables(s)));
    ints = aligned(size_t(BatchLayout(max_tokens, max_seqs, stride, max_rows).total) * 4);
    moe = moe_here ? aligned(MoeScratch::bytes(moe_config(s), moe_chunk_tokens(max_tokens))) : 0;
    boundary = whole ? 0 : aligned(size_t(max_tokens * H) * 2);
  }
  size_t total() const {
    return x + normed + wide + q + mid + proj + head_in + logits + inv_freq + ints + moe + aux + boundary;
  }
};

}  // namespace spark::cuda
