// layer_forward.cu — the decoder (and encoder) layers of one step on the device
// (layer_forward.h): fused kernels around cuBLASLt GEMMs and the GEMV family, one block of
// each layer at a time.
#include "engine/backend/cuda/layer_forward.h"

#include "engine/backend/cuda/bias.h"
#include "engine/backend/cuda/boundary.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/delta_net.h"
#include "engine/backend/cuda/f32_scale.h"
#include "engine/backend/cuda/gate_up_gemv.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/mamba2.h"
#include "engine/backend/cuda/output_gate.h"
#include "engine/backend/cuda/rms_norm.h"
#include "engine/backend/cuda/swiglu.h"

namespace spark::cuda {
namespace {

DeltaNetShape delta_net_shape(const ModelSpec& s) {
  const ModelSpec::DeltaNet& d = s.delta_net;
  return {int32_t(d.num_k_heads), int32_t(d.num_v_heads), int32_t(d.k_head_dim), int32_t(d.v_head_dim),
          int32_t(d.conv_kernel), d.value_heads_tiled, float(s.rms_norm_eps)};
}

Mamba2Shape mamba2_shape(const ModelSpec& s) {
  const ModelSpec::Mamba2& m = s.mamba2;
  Mamba2Shape x;
  x.num_heads = int32_t(m.num_heads);
  x.head_dim = int32_t(m.head_dim);
  x.n_groups = int32_t(m.n_groups);
  x.state_size = int32_t(m.state_size);
  x.conv_kernel = int32_t(m.conv_kernel);
  x.dt_min = float(m.dt_min);
  x.dt_max = float(m.dt_max);
  x.eps = float(s.rms_norm_eps);
  return x;
}

// One step's pass over the layers. Each block (a token mixer or a feed-forward) reads the
// normed residual rows from act.normed and leaves its f32 output in act.proj, which the
// next block's norm adds to x: a Nemotron-H layer has one block, the others two.
template <typename T>
class Layers {
 public:
  Layers(const LayerStep& s, const DeviceBatch& db, cudaStream_t stream, bool programmatic)
      : s_(s), db_(db), act_(s.act), stream_(stream), programmatic_(programmatic), rows_(db.num_tokens),
        hidden_(int32_t(s.spec.hidden_size)), eps_(float(s.spec.rms_norm_eps)) {}

  void run() {
    for (size_t l = 0; l < s_.weights.layers.size(); ++l) {
      const DeviceLayer& L = s_.weights.layers[l];
      const LayerShape& shape = s_.shapes[l];
      if (shape.norm_placement == NormPlacement::POST) {
        encoder_layer(L, l);
        continue;
      }
      const bool sandwich = shape.norm_placement == NormPlacement::SANDWICH;
      if (shape.mixer != Mixer::NONE) {
        add_and_norm(L.attn_norm);
        if (shape.mixer == Mixer::RECURRENT) delta_net(L, l);
        else if (shape.mixer == Mixer::MAMBA2) mamba2(L, l);
        else attention(L, l);
        if (sandwich) post_norm(L.post_attn_norm);
      }
      if (shape.ffn) {
        add_and_norm(L.ffn_norm);
        const float* out = act_.proj;
        if (shape.moe_beside_mlp) out = mlp_beside_experts(L, shape);
        else if (shape.moe) moe(L, shape);
        else mlp(shape, L.gate_up, int32_t(s_.spec.intermediate_size), L.down, act_.proj);
        if (sandwich) post_norm(L.post_ffn_norm, out);
      }
      // Gemma 4: the whole residual stream times the layer's scalar, once it holds the layer's output.
      if (L.layer_scalar) {
        add_scale_f32(act_.x, pending_, int64_t(rows_) * hidden_, L.layer_scalar, stream_, programmatic_);
        pending_ = nullptr;
      }
    }
    // The last block's output joins the residual stream here (the next stage, or the final
    // norm, reads x).
    if (pending_ || pending_sum_.terms > 0) add_pending(nullptr, static_cast<T*>(nullptr));
  }

 private:
  T* t(void* p) const { return static_cast<T*>(p); }

  // x += the previous block's output, then act.normed = rms_norm(x) * w in T.
  void add_and_norm(const float* w) {
    add_pending(w, t(act_.normed));
    pending_ = act_.proj;
  }

  // x += the pending output (a buffer, or the MoE block's weighted sum), then out =
  // rms_norm(x) * w (out null: the add alone).
  void add_pending(const float* w, T* out) {
    if (pending_sum_.terms > 0) {
      add_rms_norm<T>(act_.x, pending_sum_, w, rows_, hidden_, eps_, out, stream_, programmatic_);
      pending_sum_ = {};
    } else {
      add_rms_norm<T>(act_.x, pending_, w, rows_, hidden_, eps_, out, stream_, programmatic_);
    }
  }

  // Gemma's sandwich: the block's output (act.proj, or Gemma 4's MoE block's sum) normed in
  // f32 into act.aux, which joins x in its place.
  void post_norm(const float* w, const float* out = nullptr) {
    rms_norm_strided<float>(out ? out : act_.proj, rows_, w, hidden_, eps_, act_.aux, hidden_, stream_, programmatic_);
    pending_ = act_.aux;
  }

  void linear(const void* x, int32_t k, const DeviceMatrix& w, int32_t n, void* y, GemmOut out) {
    s_.gemm.linear(s_.half, x, rows_, k, w, n, y, out, stream_, GemmPath::AUTO, programmatic_);
  }

  RecurrentStates states_of(size_t l) const {
    return {s_.states, s_.state_slot_values, s_.recurrent_index[l] * s_.spec.recurrent_state_values(), db_.state_slots};
  }

  void attention(const DeviceLayer& L, size_t l) {
    const LayerShape& shape = s_.shapes[l];
    // This layer's geometry: Gemma 4's full layers have their own kv heads and head width,
    // and no v rows where the values are the keys (k_eq_v). Gemma 4's assistant projects
    // queries only, and reads the K and V its model's layer holds (cache[l] is that one's).
    const int32_t hd = int32_t(shape.head_dim), nh = int32_t(shape.num_heads);
    const int32_t kv_rows = shape.reads_model_kv ? 0 : (shape.k_eq_v ? 1 : 2) * int32_t(shape.num_kv_heads);
    const int32_t gate_at = (nh + kv_rows) * hd, qkv_n = gate_at + (shape.output_gate ? nh * hd : 0);
    linear(act_.normed, hidden_, L.qkv, qkv_n, act_.wide, GemmOut::HALF);
    KvShape layer_kv = s_.kv;
    layer_kv.num_kv_heads = int32_t(shape.num_kv_heads);
    layer_kv.head_dim = hd;
    // A sliding layer holds the window blocks only; 0: queries only (rope_kv.h).
    layer_kv.num_slots = shape.reads_model_kv ? 0 : s_.cache[l].num_blocks * s_.kv.block_size;
    qkv_rope_kv_write<T>(t(act_.wide), L.qkv_bias, L.q_norm, L.k_norm, eps_, db_.positions, db_.slot_mapping, rows_, nh,
                         qkv_n, s_.ropes[l], layer_kv, s_.cache[l], t(act_.q), stream_, programmatic_,
                         {shape.k_eq_v, shape.v_norm});
    s_.attention[l]->run(db_, s_.cache[l], act_.q, act_.mid, stream_, programmatic_,
                         {int32_t(shape.window), L.sinks, !shape.bidirectional});
    // The gates sit after v in each qkv row, untouched until gate_up overwrites them.
    if (shape.output_gate)
      apply_output_gate<T>(t(act_.mid), t(act_.wide) + gate_at, qkv_n, rows_, nh * hd, stream_, programmatic_);
    linear(act_.mid, nh * hd, L.o, hidden_, act_.proj, GemmOut::F32);
    // A post-norm layer's norm adds the bias with the projection (encoder_layer).
    if (L.o_bias && shape.norm_placement != NormPlacement::POST)
      add_bias_f32(act_.proj, L.o_bias, rows_, hidden_, stream_, programmatic_);
  }

  // An encoder layer (post-norm): x = LN(x + attn(x)), then x = LN(x + ffn(x)), with
  // ffn = down(gelu(up h + up_bias)) + down_bias. Each norm also leaves x rounded to T in
  // act.normed, the next block's input (the embedding's norm, or the stage's input, does
  // so for the first layer); the output projections' biases are added in the norms.
  void encoder_layer(const DeviceLayer& L, size_t l) {
    const int32_t inter = int32_t(s_.spec.intermediate_size);
    attention(L, l);
    add_layer_norm<T>(act_.x, act_.proj, L.o_bias, L.attn_norm, L.attn_norm_bias, rows_, hidden_, eps_, t(act_.normed),
                      stream_, programmatic_);
    linear(act_.normed, hidden_, L.gate_up, inter, act_.mid, GemmOut::HALF);
    bias_gelu<T>(t(act_.mid), L.up_bias, rows_, inter, stream_, programmatic_);
    linear(act_.mid, inter, L.down, hidden_, act_.proj, GemmOut::F32);
    add_layer_norm<T>(act_.x, act_.proj, L.down_bias, L.ffn_norm, L.ffn_norm_bias, rows_, hidden_, eps_,
                      t(act_.normed), stream_, programmatic_);
  }

  // The Gated DeltaNet: its four projections in f32 (the recurrence accumulates them), the
  // mixer over each sequence's state slot, then out_proj.
  void delta_net(const DeviceLayer& L, size_t l) {
    const ModelSpec::DeltaNet& d = s_.spec.delta_net;
    const int32_t C = int32_t(d.conv_dim()), vd = int32_t(d.value_dim()), hv = int32_t(d.num_v_heads);
    float* qkv = act_.aux;
    float* z = qkv + int64_t(rows_) * C;
    float* b = z + int64_t(rows_) * vd;
    float* a = b + int64_t(rows_) * hv;
    linear(act_.normed, hidden_, L.lin_qkv, C, qkv, GemmOut::F32);
    linear(act_.normed, hidden_, L.lin_z, vd, z, GemmOut::F32);
    linear(act_.normed, hidden_, L.lin_b, hv, b, GemmOut::F32);
    linear(act_.normed, hidden_, L.lin_a, hv, a, GemmOut::F32);
    delta_net_mix<T>(delta_net_shape(s_.spec), {L.lin_conv, L.lin_neg_exp_a, L.lin_dt_bias, L.lin_norm}, states_of(l),
                     db_.state_query_start, db_.positions, db_.num_seqs, rows_, qkv, z, b, a, t(act_.mid), stream_,
                     programmatic_);
    linear(act_.mid, vd, L.lin_out, hidden_, act_.proj, GemmOut::F32);
  }

  // Mamba-2: in_proj in f32 (z, x|B|C, dt: the scan accumulates them), the mixer over each
  // sequence's state slot, then out_proj.
  void mamba2(const DeviceLayer& L, size_t l) {
    const Mamba2Shape m = mamba2_shape(s_.spec);
    linear(act_.normed, hidden_, L.ssm_in, int32_t(m.in_proj_rows()), act_.aux, GemmOut::F32);
    mamba2_mix<T>(m, {L.ssm_conv, L.ssm_conv_bias, L.ssm_neg_exp_a, L.ssm_d, L.ssm_dt_bias, L.ssm_norm}, states_of(l),
                  db_.state_query_start, db_.positions, db_.num_seqs, rows_, act_.aux, t(act_.mid), stream_,
                  programmatic_);
    linear(act_.mid, int32_t(m.inner()), L.ssm_out, hidden_, act_.proj, GemmOut::F32);
  }

  // A dense MLP on the normed rows into `out` (f32): silu(gate) * up, Gemma's
  // gelu_tanh(gate) * up, or (Nemotron-H) relu(up)^2 with gate_up holding the up rows only,
  // through `down`.
  void mlp(const LayerShape& shape, const DeviceMatrix& gate_up, int32_t inter, const DeviceMatrix& down, float* out) {
    if (shape.activation == Activation::RELU2) {
      linear(act_.normed, hidden_, gate_up, inter, act_.mid, GemmOut::HALF);
      relu2<T>(t(act_.mid), int64_t(rows_) * inter, stream_, programmatic_);
    } else if (shape.activation == Activation::SILU && rows_ <= kGemvMaxRows &&
               gate_up_fusable(gate_up, inter, hidden_)) {  // packed: one pass
      gate_up_swiglu_gemv(s_.half, act_.normed, rows_, hidden_, gate_up, inter, act_.mid, stream_, programmatic_);
    } else {
      linear(act_.normed, hidden_, gate_up, 2 * inter, act_.wide, GemmOut::HALF);
      swiglu<T>(t(act_.wide), rows_, inter, t(act_.mid), stream_, programmatic_,
                shape.activation == Activation::GELU_TANH);
    }
    linear(act_.mid, inter, down, hidden_, out, GemmOut::F32);
  }

  ExpertWeights experts(const DeviceLayer& L, const LayerShape& shape) const {
    const bool clamped = shape.activation == Activation::CLAMPED_SWIGLU;
    return {L.expert_gate_up, L.expert_down,
            {L.expert_gate_up_bias, L.expert_down_bias, clamped ? shape.swiglu_limit : 0.0f, shape.swiglu_alpha,
             shape.activation == Activation::GELU_TANH}};
  }

  // Gemma 4's MoE block, as transformers' Gemma4TextDecoderLayer: the dense MLP on the
  // ffn-normed rows and the experts on x through their own norm, routed on x through the
  // router's scaled norm, each output normed; returns their sum (in act.aux's second [rows,
  // hidden], which the sandwich's post-FFN norm in run() reads).
  const float* mlp_beside_experts(const DeviceLayer& L, const LayerShape& shape) {
    const int64_t n = int64_t(rows_) * hidden_;
    float* dense = act_.aux;
    float* routed = act_.aux + n;
    mlp(shape, L.gate_up, int32_t(s_.spec.intermediate_size), L.down, act_.proj);
    rms_norm_strided<float>(act_.proj, rows_, L.post_mlp_norm, hidden_, eps_, dense, hidden_, stream_, programmatic_);
    rms_norm_strided<T>(act_.x, rows_, L.moe_norm, hidden_, eps_, t(act_.normed), hidden_, stream_, programmatic_);
    MoeLayerWeights w{L.router_norm, L.router, nullptr, nullptr, experts(L, shape)};
    w.expert_scale = L.expert_scale;
    moe_forward(s_.half, moe_config(s_.spec), w, act_.x, eps_, act_.normed, rows_, *s_.moe, act_.proj, stream_,
                programmatic_);
    rms_norm_strided<float>(act_.proj, rows_, L.post_moe_norm, hidden_, eps_, routed, hidden_, stream_, programmatic_);
    add_gated_rows(routed, dense, nullptr, 1, rows_, hidden_, stream_, programmatic_);  // ungated: routed += dense
    return routed;
  }

  // A plain MoE block (its output straight into the residual: Qwen3-MoE, gpt-oss) of one
  // chunk leaves its weighted sum to the next add_rms_norm (moe.h, rms_norm.h's
  // WeightedRows): no combine launch, no [rows, hidden] f32 written and read back. A shared
  // expert (Nemotron-H, Qwen3.5-MoE), LatentMoE's projection back, a sandwich's post-norm or
  // a layer scalar reads the sum first: those keep moe_forward's combine.
  bool sum_deferrable(const DeviceLayer& L, const LayerShape& shape) const {
    return !L.moe_latent_in.data && !shape.shared_expert && shape.norm_placement != NormPlacement::SANDWICH &&
           !L.layer_scalar && rows_ <= s_.moe->chunk_tokens;
  }

  void moe(const DeviceLayer& L, const LayerShape& shape) {
    const MoeLayerWeights w{L.ffn_norm, L.router, L.router_bias, L.router_score_bias, experts(L, shape)};
    const MoeConfig cfg = moe_config(s_.spec);
    if (sum_deferrable(L, shape)) {
      const MoeScratch& m = *s_.moe;
      moe_forward(s_.half, cfg, w, act_.x, eps_, act_.normed, rows_, m, nullptr, stream_, programmatic_);
      pending_sum_ = {m.y, m.groups.pair_row, m.weights, cfg.top_k};
      pending_ = nullptr;
      return;
    }
    if (L.moe_latent_in.data) {
      // LatentMoE (Nemotron-3-Super): routed on the hidden rows, the experts run on their
      // latent projection, and the weighted sum goes back out to the hidden width.
      const int32_t latent = cfg.shape.hidden;
      linear(act_.normed, hidden_, L.moe_latent_in, latent, act_.wide, GemmOut::HALF);
      moe_forward(s_.half, cfg, w, act_.x, eps_, act_.wide, rows_, *s_.moe, act_.aux, stream_, programmatic_);
      hidden_to_16bit<T>(act_.aux, int64_t(rows_) * latent, t(act_.mid), stream_);
      linear(act_.mid, latent, L.moe_latent_out, hidden_, act_.proj, GemmOut::F32);
    } else {
      moe_forward(s_.half, cfg, w, act_.x, eps_, act_.normed, rows_, *s_.moe, act_.proj, stream_, programmatic_);
    }
    if (!shape.shared_expert) return;
    // proj += the shared expert's output: scaled by sigmoid(shared_expert_gate . h) where
    // the model has that gate (Qwen3.5/3.6, Qwen3-Next), as it is otherwise (Nemotron-H).
    float* shared = act_.aux;
    const bool gated = L.shared_expert_gate.data != nullptr;
    float* logit = gated ? act_.aux + int64_t(rows_) * hidden_ : nullptr;
    mlp(shape, L.shared_gate_up, int32_t(s_.spec.shared_expert_intermediate_size), L.shared_down, shared);
    if (gated) linear(act_.normed, hidden_, L.shared_expert_gate, 1, logit, GemmOut::F32);
    add_gated_rows(act_.proj, shared, logit, 1, rows_, hidden_, stream_, programmatic_);
  }

  const LayerStep& s_;
  const DeviceBatch& db_;
  const Activations& act_;
  cudaStream_t stream_;
  bool programmatic_;
  int32_t rows_, hidden_;
  float eps_;
  const float* pending_ = nullptr;  // a block's output that x does not have yet (act.proj or act.aux), or null
  WeightedRows pending_sum_;        // terms > 0: instead, the MoE block's weighted sum (moe())
};

}  // namespace

template <typename T>
void run_layers(const LayerStep& s, const DeviceBatch& db, cudaStream_t stream, bool programmatic) {
  Layers<T>(s, db, stream, programmatic).run();
}

template void run_layers<bf16>(const LayerStep&, const DeviceBatch&, cudaStream_t, bool);
template void run_layers<f16>(const LayerStep&, const DeviceBatch&, cudaStream_t, bool);

}  // namespace spark::cuda
