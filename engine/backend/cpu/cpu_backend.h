// cpu_backend.h — the reference backend: f32 arithmetic over any supported weight dtype,
// a paged f32 KV cache, multi-threaded over engine.cpu_threads.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/attention.h"
#include "engine/backend/cpu/delta_net.h"
#include "engine/backend/cpu/mamba2.h"
#include "engine/backend/cpu/moe.h"
#include "engine/backend/cpu/ops.h"
#include "engine/model/layer_shape.h"
#include "engine/model/model_spec.h"
#include "engine/model/stage_weights.h"
#include "engine/util/thread_pool.h"

namespace spark {

class CpuBackend : public Backend {
 public:
  // Reads the tensors of the stage `weights` binds (they must outlive the backend);
  // throws InputError naming a tensor of a dtype it cannot read. threads: 0 = every core.
  CpuBackend(const ModelSpec& spec, const StageWeights& weights, int threads);

  std::string describe() const override;
  LayerRange layers() const override { return range_; }
  size_t kv_block_bytes(int64_t block_size) const override;
  void init_kv_cache(int64_t num_blocks, int64_t block_size) override;
  void init_windowed_kv_cache(int64_t num_blocks, int64_t num_window_blocks, int64_t block_size) override;
  void init_state_slots(int64_t num_slots) override;
  void forward(const Batch& batch, const float* hidden_in, ForwardResult& out) override;
  int64_t rows_at_decode_cost() const override;
  void attach_model(const Backend& model) override;  // engine/backend/cpu/assistant.cpp

  // For the memory plan, before a backend exists: K and V bytes of one token in the layers
  // of `range` (f32; of the sliding layers only, with sliding_only), and the activations
  // of a step of max_step_tokens rows (plus one logits row per sequence on the last stage).
  static uint64_t kv_bytes_per_token(const ModelSpec& spec, LayerRange range, bool sliding_only = false);
  static uint64_t workspace_bytes(const ModelSpec& spec, LayerRange range, int64_t max_step_tokens, int64_t max_seqs);

 private:
  struct Layer {
    Mixer mixer = Mixer::ATTENTION;  // RECURRENT: `delta`, MAMBA2: `mamba`, no attention parts
    cpu::DeltaNetWeights delta;
    cpu::Mamba2Weights mamba;
    int64_t state_index = -1;  // which of the held recurrent layers it is
    bool ffn = true;           // false in a Nemotron-H mixer block
    bool rope = true;
    bool attends() const { return mixer == Mixer::ATTENTION; }
    bool reads_model_kv = false;  // Gemma 4's assistant: queries over the model's K and V (model_layer_)
    const Tensor* q = nullptr;  // with an output gate, per head the query rows then the gate rows
    bool output_gate = false;
    const Tensor* k = nullptr;
    const Tensor* v = nullptr;  // null where the values are the key projection (Gemma 4's k_eq_v)
    const Tensor* o = nullptr;
    int64_t num_kv_heads = 0, head_dim = 0;  // the layer's own (Gemma 4's full layers differ)
    bool v_norm = false;                     // values normed per head by a weightless RMSNorm
    float layer_scalar = 1.0f;               // Gemma 4: the layer's output times it
    std::vector<float> q_bias, k_bias, v_bias;  // empty without attention_bias
    std::vector<float> o_bias, sinks;           // gpt-oss; empty otherwise
    int64_t window = 0;                         // sliding-window layer: tokens it sees
    std::vector<float> q_norm, k_norm;          // empty without qk_norm
    std::vector<float> attn_norm, ffn_norm;
    // Sandwich norms (Gemma): on the attention's and the MLP's outputs; empty otherwise.
    std::vector<float> post_attn_norm, post_ffn_norm;
    size_t rope_index = 0;            // which of ropes_ the layer rotates q and k with
    float attention_scale = 0.0f;     // 0: 1/sqrt(head_dim)
    bool gelu_tanh = false;           // the gated MLP's activation is GELU (tanh), not SiLU
    // An encoder layer (post-norm LayerNorms, biased GELU MLP, bidirectional attention).
    bool encoder = false;
    std::vector<float> attn_norm_bias, ffn_norm_bias, up_bias, down_bias;
    const Tensor* gate = nullptr;  // dense MLP (null in an MoE layer, and without a gate: relu^2)
    const Tensor* up = nullptr;
    const Tensor* down = nullptr;
    cpu::MoeWeights moe;  // router set in an MoE layer
    bool relu2 = false;  // ungated down(relu(up x)^2) feed-forwards (Nemotron-H)
    // LatentMoE (Nemotron-3-Super): into the experts' latent space and back; null without.
    const Tensor* latent_in = nullptr;
    const Tensor* latent_out = nullptr;
    // The shared expert beside the routed ones, and its gate [1, hidden]; null without
    // (the gate also beside a sigmoid router, which adds the shared expert as it is).
    const Tensor* shared_gate = nullptr;
    const Tensor* shared_up = nullptr;
    const Tensor* shared_down = nullptr;
    const Tensor* shared_expert_gate = nullptr;
    // Gemma 4's MoE block (moe_beside_mlp): the experts' input norm, the dense MLP's and the
    // experts' output norms, and the router's input norm (its scale / sqrt(hidden_size)).
    bool moe_beside_mlp = false;
    std::vector<float> moe_norm, post_mlp_norm, post_moe_norm, router_norm;
  };

  void run_layer(int64_t index, const Batch& batch, float* x);
  // The attention mixer of held layer `index`: h (normed x) in, its output in h.
  void attend(int64_t index, const Batch& batch, float* h);
  // The MLP (dense, or routed and shared experts) of `L` on h; adds its output to x.
  void feed_forward(const Layer& L, float* h, int64_t T, float* x);
  // Gemma 4's MoE block on the residual x (h: its FFN_NORM); adds its output to x.
  void dense_beside_experts(const Layer& L, float* h, int64_t T, float* x);
  void embed_mtp_input(const Batch& batch, const float* hidden_in, float* x);
  // Gemma 4's assistant (engine/backend/cpu/assistant.cpp): its input, ASSIST_IN over [the
  // model's scaled embedding; hidden_in]; its hidden rows, ASSIST_OUT of the normed rows h
  // [R x H] (into out, [R x model hidden]); its logits over its most likely clusters only.
  void embed_assistant_input(const Batch& batch, const float* hidden_in, float* x);
  void assistant_hidden(const float* h, int64_t R, std::vector<float>& out);
  void clustered_logits(const float* h, int64_t R, float* logits);
  // An assistant's attention mixer of held layer `index` (queries over the model's K and V).
  void attend_model_kv(int64_t index, const Batch& batch, float* h);
  // An encoder's input: LayerNorm(token + learned position + token type 0).
  void embed_encoder_input(const Batch& batch, float* x);
  // An encoder layer on x in place: x = LN(x + attn(x)), x = LN(x + ffn(x)).
  void run_encoder_layer(int64_t index, const Batch& batch, float* x);
  // Checks the batch's state slots and zeroes the states of sequences starting afresh;
  // one state pointer per sequence for held recurrent layer `r`.
  void prepare_states(const Batch& batch);
  std::vector<float*> states_of(const Batch& batch, int64_t r);
  // The cache geometry of held layer `index`: a sliding-window layer's holds the window blocks only.
  cpu::KvGeometry layer_kv(int64_t index) const;

  ModelSpec spec_;
  LayerRange range_;
  bool has_embedding_ = false;
  bool has_head_ = false;
  const Tensor* embedding_ = nullptr;
  const Tensor* lm_head_ = nullptr;
  std::vector<float> final_norm_;
  // An MTP head's input (ModelSpec::mtp_head): fc over [norm(embedding); norm(hidden_in)].
  const Tensor* mtp_fc_ = nullptr;
  std::vector<float> mtp_embed_norm_, mtp_hidden_norm_;
  std::vector<float> mtp_in_;  // [T x 2H]
  // Gemma 4's assistant: its parts, and the model whose embedding and K and V it reads,
  // model_layer_[i] the model's layer held layer i reads (attach_model).
  const Tensor* assist_in_ = nullptr;
  const Tensor* assist_out_ = nullptr;
  const Tensor* centroids_ = nullptr;
  std::vector<int32_t> token_order_;  // [vocab]: the clusters' tokens, cluster after cluster
  const CpuBackend* model_ = nullptr;
  std::vector<int64_t> model_layer_;
  std::vector<float> assist_rows_;  // [T x 2 x model hidden]
  // An encoder's input (ModelSpec::encoder): rows of the position table and token type 0.
  const Tensor* pos_embedding_ = nullptr;
  std::vector<float> type0_, embed_norm_, embed_norm_bias_;
  std::vector<Layer> layers_;
  // The RoPEs of the held layers, each distinct (head width, base, scaling) once: one for
  // most models, two for Gemma (its sliding layers' own).
  struct RopeKey {
    int64_t head_dim, rotary_dim;
    double theta;
    RopeScaling scaling;
    bool operator==(const RopeKey&) const = default;
  };
  std::vector<cpu::Rope> ropes_;
  std::vector<RopeKey> rope_keys_;  // [ropes_.size()]
  std::unique_ptr<ThreadPool> pool_;
  cpu::KvGeometry kv_;
  int64_t window_blocks_ = 0;  // blocks the sliding-window layers hold
  std::vector<cpu::LayerKv> cache_;  // empty for a recurrent layer
  // Recurrent layers: [slot][held recurrent layer][ModelSpec::recurrent_state_values()] f32.
  int64_t num_recurrent_ = 0;
  int64_t num_state_slots_ = 0;
  std::vector<float> states_;
  cpu::DeltaNetScratch delta_scratch_;
  cpu::Mamba2Scratch mamba_scratch_;
  // Activation workspaces, grown to the largest batch seen and reused.
  std::vector<float> x_, h_, q_, k_, v_, att_, gate_, up_, q_gate_, moe_in_, route_in_;
  // The widest layer's query and K (or V) values a token, and ones for weightless norms.
  int64_t max_q_dim_ = 0, max_kv_dim_ = 0;
  std::vector<float> ones_;
};

}  // namespace spark
