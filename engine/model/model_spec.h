// model_spec.h — the architecture-independent description of a decoder-only model,
// filled from a Hugging Face config.json or from GGUF metadata.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/tensor.h"

namespace spark {

struct Architecture;  // engine/model/architecture.h: one per file under engine/model/arch/

struct RopeScaling {
  std::string type;  // "" (none), "llama3", "linear", "yarn", "proportional"
  double factor = 1.0;
  // Proportional (Gemma 4's full layers): the fraction of each head's frequency pairs that
  // turn, over NeoX halves of the whole head with exponents over the whole head_dim; the
  // other pairs have frequency 0. All frequencies are divided by `factor`.
  double rotated_fraction = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // YaRN: the band of frequencies blended between kept and interpolated, whether its
  // bounds are rounded to whole dimensions, and the factor cos/sin are multiplied by.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  double attention_factor = 1.0;
  bool operator==(const RopeScaling&) const = default;
};

struct ModelSpec {
  std::string architecture;  // Hugging Face class name, e.g. "LlamaForCausalLM"
  // What the architecture adds (its hooks and flags); null only in specs built by hand.
  const Architecture* arch = nullptr;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  bool o_bias = false;          // the output projection carries a bias too (gpt-oss)
  bool attention_sinks = false; // a learned per-head logit joins each softmax (gpt-oss)
  // Layers that attend to the last `sliding_window` tokens only (gpt-oss's layer_types);
  // empty when every layer attends to the whole context.
  int64_t sliding_window = 0;
  std::vector<uint8_t> layer_sliding;  // [num_layers] when sliding_window > 0
  // Qwen3.5/3.6: q_proj yields a gate beside each head's query (per head: head_dim query
  // rows, then head_dim gate rows), and the attention output is multiplied by its sigmoid.
  bool attn_output_gate = false;
  // The dimensions of each head RoPE rotates (NeoX halves within them); 0: all head_dim.
  int64_t rotary_dim = 0;
  // Zero-centred RMSNorm weights (Qwen3.5/3.6, Gemma): x / rms(x) * (1 + w).
  bool norm_plus_one = false;

  // Gemma: each branch's output is normed too before it joins the residual ("sandwich":
  // x + post_norm(f(pre_norm(x))), the parts POST_ATTN_NORM and POST_FFN_NORM).
  bool sandwich_norms = false;
  // The gated MLP's activation is GELU with the tanh approximation, down(gelu(gate x) * up x).
  bool gelu_tanh_mlp = false;
  // Queries are scaled by query_pre_attn_scalar^-1/2 rather than head_dim^-1/2; 0: head_dim's.
  double query_pre_attn_scalar = 0;
  // The token embedding is multiplied by sqrt(hidden_size) (Gemma's normalizer).
  bool scale_embedding = false;
  // > 0: the logits are capped, tanh(logits / cap) * cap (Gemma 2's final_logit_softcapping).
  double final_logit_softcap = 0;
  // Sliding-window layers with a RoPE of their own (Gemma 3: rope_local_base_freq, no
  // scaling); otherwise every layer uses rope_theta and rope_scaling.
  bool sliding_rope = false;
  double sliding_rope_theta = 10000.0;
  RopeScaling sliding_rope_scaling;

  // Gemma 4: the full-attention ("global") layers' own geometry, global_head_dim and
  // num_global_key_value_heads; 0: head_dim / num_kv_heads, as the sliding layers'.
  int64_t full_head_dim = 0;
  int64_t full_num_kv_heads = 0;
  // Gemma 4's attention_k_eq_v: the full-attention layers have no v_proj; their values are
  // the key projection as it comes (before k_norm and RoPE).
  bool full_k_eq_v = false;
  // Gemma 4: the values are normed per head by an RMSNorm without a weight.
  bool v_norm = false;
  // Gemma 4: each layer's output, the whole residual stream, is multiplied by the layer's
  // LAYER_SCALAR.
  bool layer_scalar = false;
  // Gemma 4's MoE block: every layer has the dense MLP and the routed experts side by
  // side, on the same residual r: the MLP reads FFN_NORM(r) and is normed by POST_MLP_NORM,
  // the experts read MOE_NORM(r) and are normed by POST_MOE_NORM, the two are added and
  // normed by POST_FFN_NORM. The router reads r through an RMSNorm whose weight is
  // ROUTER_INPUT_SCALE / sqrt(hidden_size); softmax over every expert, the top k
  // renormalised, each times its EXPERT_SCALE.
  bool moe_beside_mlp = false;

  // Hybrids (Qwen3.5/3.6): layers whose token mixer is a Gated DeltaNet, a recurrent state
  // per sequence in place of attention over the KV cache; empty when every layer attends.
  std::vector<uint8_t> layer_recurrent;  // [num_layers]
  struct DeltaNet {
    int64_t num_k_heads = 0, num_v_heads = 0;  // a key head serves num_v_heads / num_k_heads value heads
    int64_t k_head_dim = 0, v_head_dim = 0;
    int64_t conv_kernel = 0;  // the depthwise causal conv1d over the q, k and v channels
    // How the value heads follow the key heads. Grouped (Hugging Face): the value heads
    // of key head k are k * per_key ... (k + 1) * per_key - 1. Tiled (llama.cpp's GGUF):
    // value head h reads key head h % num_k_heads.
    bool value_heads_tiled = false;
    int64_t key_dim() const { return num_k_heads * k_head_dim; }
    int64_t value_dim() const { return num_v_heads * v_head_dim; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
    // One layer's state of one sequence, in f32 values: the last conv_kernel - 1 inputs
    // of every conv channel, and a k_head_dim x v_head_dim matrix per value head.
    int64_t state_values() const { return conv_dim() * (conv_kernel - 1) + num_v_heads * k_head_dim * v_head_dim; }
  } delta_net;
  // Nemotron-H: the recurrent layers are Mamba-2 mixers instead (num_heads > 0). in_proj
  // yields z [inner], x|B|C [conv_dim] and dt [num_heads]; a depthwise causal conv1d
  // (with bias) and SiLU over x|B|C; per head a head_dim x state_size state, decayed by
  // exp(dt A) and fed dt x B^T, read by C, plus D x; then an RMSNorm over each group of
  // inner / n_groups channels of y * silu(z), and out_proj.
  struct Mamba2 {
    int64_t num_heads = 0, head_dim = 0, n_groups = 0, state_size = 0, conv_kernel = 0;
    bool conv_bias = true;
    // dt = clamp(softplus(dt + dt_bias), dt_min, dt_max): transformers clamps from below
    // at time_step_min (its mixer's time_step_limit), with no upper limit.
    double dt_min = 0.0, dt_max = 0.0;  // dt_max 0: none
    int64_t chunk_size = 0;  // the SSD scan's chunk (prefill kernels)
    int64_t inner() const { return num_heads * head_dim; }
    int64_t conv_dim() const { return inner() + 2 * n_groups * state_size; }
    int64_t in_proj_rows() const { return inner() + conv_dim() + num_heads; }
    // One layer's state of one sequence, in f32 values: the last conv_kernel - 1 inputs of
    // every conv channel, and a head_dim x state_size matrix per head.
    int64_t state_values() const { return conv_dim() * (conv_kernel - 1) + num_heads * head_dim * state_size; }
  } mamba2;
  bool mamba2_layers() const { return mamba2.num_heads > 0; }
  // The state one sequence holds in one recurrent layer (f32 values), of either kind.
  int64_t recurrent_state_values() const { return mamba2_layers() ? mamba2.state_values() : delta_net.state_values(); }
  // Nemotron-H: each layer is one block, `x + f(norm(x))` with f a token mixer or a feed-
  // forward, not both ([num_layers]: 1 = the feed-forward only); empty when every layer
  // has both. A feed-forward-only layer's norm is FFN_NORM, a mixer-only one's ATTN_NORM.
  std::vector<uint8_t> layer_ffn_only;
  std::vector<uint8_t> layer_mixer_only;
  // Attention without RoPE (Nemotron-H: the Mamba layers carry position).
  bool no_rope = false;

  // Mixture of experts (Qwen3-MoE); num_experts == 0 for dense models.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // An always-on expert beside the routed ones (Qwen3.5/3.6), its output scaled by
  // sigmoid(shared_expert_gate . x); 0 when there is none.
  int64_t shared_expert_intermediate_size = 0;
  // gpt-oss: the router has a bias and takes the softmax over the top-k logits only; the
  // experts have biases and a clamped SwiGLU, gate * sigmoid(alpha * gate) * (up + 1).
  bool gptoss_moe = false;
  double swiglu_limit = 7.0;
  double swiglu_alpha = 1.702;
  // Nemotron-H's MoE: the router's scores are sigmoid(logits); the experts are chosen by
  // score + a per-expert correction bias (ROUTER_SCORE_BIAS) and weighted by their scores
  // (normalised when norm_topk_prob) times routed_scaling_factor; the shared expert is
  // added ungated.
  bool sigmoid_router = false;
  double routed_scaling_factor = 1.0;
  // Nemotron-3-Super's LatentMoE: the routed experts read and write a latent vector this
  // wide (fc1_latent_proj before them, fc2_latent_proj after); 0: the hidden state itself.
  int64_t moe_latent_size = 0;
  // Non-gated squared-ReLU feed-forwards (Nemotron-H: its MLPs, experts and shared
  // expert): down(relu(up x)^2), no gate projection.
  bool relu2_mlp = false;

  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;
  DType dtype = DType::BF16;  // torch_dtype of the checkpoint

  // quantization_config with quant_method "fp8": the linear layers' weights are e4m3 with
  // f32 scales, in blocks of fp8_block_rows x fp8_block_cols (weight_block_size, e.g.
  // 128 x 128: `weight_scale_inv` tensors) or, when both are 0, per tensor or per output
  // channel (`weight_scale` tensors, their shape says which).
  bool fp8 = false;
  int64_t fp8_block_rows = 0, fp8_block_cols = 0;
  // NVIDIA ModelOpt checkpoints (quantization_config quant_method "modelopt", or
  // hf_quant_config.json): quant_algo NVFP4 or W4A16_NVFP4 (nvfp4: U8 codes with E4M3 and
  // f32 scales, nvfp4_weights.h), FP8 (fp8, one scale per tensor), or MIXED_PRECISION with
  // its map from layer prefix to algorithm (the tensors say each layer's format; the map is
  // checked against them). Weight-only: activations stay 16-bit or f32.
  bool modelopt = false;
  bool nvfp4 = false;
  // kv_cache_quant_algo "FP8": the checkpoint was calibrated for an FP8 KV cache, which
  // engine.kv_cache_dtype = "auto" then gives it on the CUDA backend (fp8_kv_cache).
  bool kv_cache_fp8 = false;
  std::map<std::string, std::string> modelopt_layers;
  // quantization_config with quant_method "mxfp4" (gpt-oss): the experts' matrices ship as
  // MXFP4 blocks (what a dummy of the model is planned with; real files say it per tensor).
  bool mxfp4_experts = false;

  // Multi-token prediction: the decoder layers of a draft head the checkpoint carries
  // beside the model (Qwen3.5/3.6's `mtp.*`, mtp_num_hidden_layers); 0 when it has none.
  int64_t mtp_layers = 0;
  // This spec describes such a head rather than the model (mtp_head_spec): one decoder
  // layer whose input is fc([norm(embedding of a token); norm(the model's final hidden
  // state at the position before it)]), and the model's LM head.
  bool mtp_head = false;
  // Nemotron-3-Super's head (mtp_hybrid_override_pattern) is several one-block layers, named
  // by hybrid_override_pattern's letters ('*' attention, '-' MLP, 'E' MoE), after the same
  // fc; empty: one layer shaped as the model's full-attention layers (Qwen3.5/3.6, Qwen3-Next).
  std::string mtp_blocks;

  // Gemma 4's assistant (Gemma4AssistantForCausalLM), a drafter that reads the model it
  // drafts for; > 0 is that model's hidden width. Its layers compute queries only and attend
  // to the K and V the model's last layer of the same type (sliding or full) holds before
  // the drafted position; its input is ASSIST_IN over [the model's scaled embedding of the
  // token; a hidden state of the model's width], and beside its logits (never soft-capped)
  // it returns ASSIST_OUT of its normed final hidden state: the next draft's hidden state.
  int64_t assistant_of_hidden = 0;
  // Its logits over the tokens of the centroid_top_k most likely of num_centroids clusters
  // only (CENTROIDS; TOKEN_ORDERING lists cluster c's tokens at [c * V / C, (c + 1) * V / C)),
  // every other token the smallest of those minus 1; 0: over the whole head.
  int64_t num_centroids = 0, centroid_top_k = 0;
  bool is_assistant() const { return assistant_of_hidden > 0; }

  // Served as an embedder or reranker ([model] role): the final hidden states are the
  // output and no LM head is loaded. tie_word_embeddings is set with it, so that nothing
  // expects a head tensor (a head the file holds is ignored, as a tied model's is).
  bool pooled = false;

  // Encoders (XLM-RoBERTa): every token attends to every token of its sequence, so a prompt
  // runs whole in one step and no prefix of it can be reused. Their layers are post-norm,
  // x = LN(x + attn(x)) then x = LN(x + ffn(x)), with LayerNorms carrying biases (rms_norm_eps
  // is their epsilon; ATTN_NORM and FFN_NORM follow what they name), biased projections, an
  // exact-GELU MLP of UP and DOWN and no RoPE. The input is the token's embedding plus its
  // learned position (row position_offset + p of the position table's position_rows) plus
  // token type 0 (when type_vocab_size > 0), through EMBED_NORM. No final norm.
  bool encoder = false;
  int64_t position_rows = 0;
  int64_t position_offset = 0;  // RoBERTa numbers positions from pad_token_id + 1
  int64_t type_vocab_size = 0;

  // A layer's attention geometry: the full layers' own where the model has one (Gemma 4).
  int64_t layer_head_dim(int64_t layer) const;
  int64_t layer_num_kv_heads(int64_t layer) const;
  bool layer_has_v_proj(int64_t layer) const { return !(full_k_eq_v && !layer_is_sliding(layer)); }
  bool layer_is_moe(int64_t layer) const;
  bool layer_is_sliding(int64_t layer) const;
  bool layer_is_recurrent(int64_t layer) const;
  bool layer_has_mixer(int64_t layer) const;  // false for a Nemotron-H feed-forward block
  bool layer_has_ffn(int64_t layer) const;    // false for a Nemotron-H mixer block
  bool has_recurrent_layers() const { return !layer_recurrent.empty(); }
};

}  // namespace spark

namespace spark {

// Builds a spec from the text of config.json and of generation_config.json ("" when the
// folder has none; its eos_token_id, when given, is the one generation stops on) and of a
// ModelOpt export's hf_quant_config.json ("" when none). Throws InputError naming
// `source`, the key and the accepted values.
ModelSpec parse_hf_config(const std::string& config_json, const std::string& generation_config_json,
                          const std::string& source, const std::string& hf_quant_config_json = "");
// The same from a model folder (config.json required, generation_config.json and
// hf_quant_config.json optional).
ModelSpec load_hf_spec(const std::string& dir);

// The MTP head of `model` (model.mtp_layers > 0) as a model of its own: its first MTP
// layer, a full-attention layer shaped as the model's (the same MLP or experts), or the
// one-block layers of mtp_blocks, the model's embedding and LM head, and the head's own
// norm as the final norm.
ModelSpec mtp_head_spec(const ModelSpec& model);

// Gemma 4's assistant `assistant` drafting for `model`: for each of its layers, the model's
// layer whose K and V it reads (the model's last attention layer of the same type, sliding
// or full). InputError unless the two fit: the assistant's backbone width, vocabulary,
// sliding window and each read layer's KV heads and head width are the model's.
std::vector<int64_t> assistant_model_layers(const ModelSpec& model, const ModelSpec& assistant);

}  // namespace spark
