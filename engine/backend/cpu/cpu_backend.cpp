// cpu_backend.cpp — the decoder forward pass (every architecture of engine/model/arch) on the CPU.
#include "engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "engine/backend/cpu/matmul.h"
#include "engine/model/layer_shape.h"
#include "engine/step/window_blocks.h"
#include "engine/util/check.h"

namespace spark {

namespace {

// Small vectors (norm weights, biases) are decoded to f32 once; empty for an absent part.
std::vector<float> vec_f32(const Tensor* t) {
  if (!t) return {};
  std::vector<float> out(static_cast<size_t>(t->numel()));
  cpu::decode_row(*t, 0, out.data());
  return out;
}

// A matrix of few values (the conv1d taps), decoded to f32 row after row.
std::vector<float> mat_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t r = 0; r < t.rows(); ++r) cpu::decode_row(t, r, out.data() + r * t.cols());
  return out;
}

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

}  // namespace

CpuBackend::CpuBackend(const ModelSpec& spec, const StageWeights& weights, int threads)
    : spec_(spec), range_(weights.range), pool_(std::make_unique<ThreadPool>(threads)) {
  const int64_t H = spec.hidden_size, hd = spec.head_dim, nh = spec.num_heads, nkv = spec.num_kv_heads;
  if (H <= 0 || hd <= 0 || nh <= 0 || nkv <= 0 || nh % nkv != 0 || spec.vocab_size <= 0)
    throw InputError("model config: hidden_size, head_dim, num_heads, num_kv_heads and vocab_size must be "
                     "positive and num_heads a multiple of num_kv_heads");
  for (const Tensor* t : all_tensors(weights))
    if (!cpu::matmul_supports(t->dtype))
      throw InputError("tensor " + t->name + " has dtype " + std::string(dtype_name(t->dtype)) +
                       ", which the CPU backend cannot read");
  const std::vector<LayerShape> shapes = layer_shapes(spec, range_);
  require_cases(shapes, spec,
                LayerCases{.backend = "the CPU backend",
                           .mixers = {Mixer::ATTENTION, Mixer::RECURRENT, Mixer::MAMBA2, Mixer::NONE},
                           .norm_placements = {NormPlacement::PRE, NormPlacement::SANDWICH, NormPlacement::POST},
                           .norm_kinds = {NormKind::RMS, NormKind::RMS_PLUS_ONE, NormKind::LAYER},
                           .activations = {Activation::SILU, Activation::CLAMPED_SWIGLU, Activation::GELU_TANH,
                                           Activation::RELU2, Activation::GELU},
                           .per_layer_geometry = true,
                           .per_layer_rope = true,
                           .partial_rotary = true,
                           .custom_attention_scale = true,
                           .output_gate = true,
                           .shared_expert = true,
                           .no_rope = true,
                           .ffn_less_layers = true,
                           .sigmoid_router = true,
                           .bidirectional = true,
                           .v_norm = true,
                           .k_eq_v = true,
                           .layer_scalar = true,
                           .moe_beside_mlp = true,
                           .reads_model_kv = true,
                           .embedding_scale = true,
                           .logit_softcap = true});
  // Zero-centred RMSNorm weights are used as (1 + w): folded in once here.
  auto norm_f32 = [&spec](const Tensor* t) {
    std::vector<float> w = vec_f32(t);
    if (spec.norm_plus_one)
      for (float& v : w) v += 1.0f;
    return w;
  };
  has_embedding_ = weights.has_embedding();
  has_head_ = weights.has_head();
  embedding_ = weights.embedding;
  lm_head_ = weights.lm_head;
  final_norm_ = norm_f32(weights.final_norm);
  if (spec.encoder && has_embedding_) {
    pos_embedding_ = weights.pos_embedding;
    type0_.assign(size_t(H), 0.0f);
    if (weights.type_embedding) cpu::decode_row(*weights.type_embedding, 0, type0_.data());
    embed_norm_ = vec_f32(weights.embed_norm);
    embed_norm_bias_ = vec_f32(weights.embed_norm_bias);
  }
  if (spec.mtp_head) {
    mtp_fc_ = weights.mtp_fc;
    mtp_embed_norm_ = norm_f32(weights.mtp_embed_norm);
    mtp_hidden_norm_ = norm_f32(weights.mtp_hidden_norm);
  }
  if (spec.is_assistant()) {
    assist_in_ = weights.assist_in;
    assist_out_ = weights.assist_out;
    centroids_ = weights.centroids;
    if (weights.token_ordering) token_order_ = read_token_ordering(*weights.token_ordering, spec.vocab_size);
  }
  for (const LayerWeights& w : weights.layers) {
    const LayerShape& shape = shapes[layers_.size()];
    Layer L;
    L.attn_norm = norm_f32(w.find(Part::ATTN_NORM));
    L.ffn_norm = norm_f32(w.find(Part::FFN_NORM));
    L.post_attn_norm = norm_f32(w.find(Part::POST_ATTN_NORM));
    L.post_ffn_norm = norm_f32(w.find(Part::POST_FFN_NORM));
    L.gelu_tanh = shape.activation == Activation::GELU_TANH;
    // Only a scale other than 1/sqrt(head_dim) is passed on: the attention computes that one itself.
    if (std::fabs(shape.attention_scale * std::sqrt(double(shape.head_dim)) - 1.0) > 1e-12)
      L.attention_scale = static_cast<float>(shape.attention_scale);
    L.num_kv_heads = shape.num_kv_heads;
    L.head_dim = shape.head_dim;
    if (shape.attends()) {
      if (shape.num_kv_heads <= 0 || shape.head_dim <= 0 || nh % shape.num_kv_heads != 0)
        throw InputError("model config: layer " + std::to_string(shape.layer) +
                         "'s kv heads must be positive and divide num_heads, and its head_dim positive");
      max_q_dim_ = std::max(max_q_dim_, nh * shape.head_dim);
      max_kv_dim_ = std::max(max_kv_dim_, shape.num_kv_heads * shape.head_dim);
    }
    if (shape.attends() && shape.rope) {
      const RopeKey key{shape.head_dim, shape.rotary_dim, shape.rope_theta, shape.rope_scaling};
      const auto it = std::find(rope_keys_.begin(), rope_keys_.end(), key);
      L.rope_index = static_cast<size_t>(it - rope_keys_.begin());
      if (it == rope_keys_.end()) {
        ropes_.emplace_back(shape.head_dim, shape.rotary_dim, shape.rope_theta, shape.rope_scaling);
        rope_keys_.push_back(key);
      }
    }
    L.v_norm = shape.v_norm;
    if (const Tensor* s = w.find(Part::LAYER_SCALAR)) L.layer_scalar = vec_f32(s).at(0);
    L.window = shape.window;
    L.mixer = shape.mixer;
    L.ffn = shape.ffn;
    L.rope = shape.rope;
    L.relu2 = shape.activation == Activation::RELU2;
    L.encoder = shape.norm_placement == NormPlacement::POST;
    L.attn_norm_bias = vec_f32(w.find(Part::ATTN_NORM_BIAS));
    L.ffn_norm_bias = vec_f32(w.find(Part::FFN_NORM_BIAS));
    L.up_bias = vec_f32(w.find(Part::UP_BIAS));
    L.down_bias = vec_f32(w.find(Part::DOWN_BIAS));
    if (shape.mixer == Mixer::MAMBA2) {
      L.state_index = num_recurrent_++;
      cpu::Mamba2Weights& m = L.mamba;
      m.in_proj = &w.get(Part::SSM_IN);
      m.out = &w.get(Part::SSM_OUT);
      m.conv = mat_f32(w.get(Part::SSM_CONV));
      m.conv_bias = vec_f32(w.find(Part::SSM_CONV_BIAS));
      m.neg_exp_a = vec_f32(w.find(Part::SSM_A_LOG));
      for (float& v : m.neg_exp_a) v = -std::exp(v);
      m.d = vec_f32(w.find(Part::SSM_D));
      m.dt_bias = vec_f32(w.find(Part::SSM_DT_BIAS));
      m.norm = vec_f32(w.find(Part::SSM_NORM));
    } else if (shape.mixer == Mixer::RECURRENT) {
      L.state_index = num_recurrent_++;
      cpu::DeltaNetWeights& d = L.delta;
      d.qkv = &w.get(Part::LIN_QKV);
      d.z = &w.get(Part::LIN_Z);
      d.b = &w.get(Part::LIN_B);
      d.a = &w.get(Part::LIN_A);
      d.out = &w.get(Part::LIN_OUT);
      d.conv = mat_f32(w.get(Part::LIN_CONV));
      d.neg_exp_a = vec_f32(w.find(Part::LIN_A_LOG));
      for (float& v : d.neg_exp_a) v = -std::exp(v);
      d.dt_bias = vec_f32(w.find(Part::LIN_DT_BIAS));
      d.norm = vec_f32(w.find(Part::LIN_NORM));  // the gated norm's weight is used as is
    } else if (shape.mixer == Mixer::ATTENTION) {
      L.reads_model_kv = shape.reads_model_kv;
      L.q = &w.get(Part::Q);
      L.k = shape.reads_model_kv ? nullptr : &w.get(Part::K);
      L.v = shape.k_eq_v || shape.reads_model_kv ? nullptr : &w.get(Part::V);
      L.o = &w.get(Part::O);
      L.output_gate = shape.output_gate;
    }
    L.q_bias = vec_f32(w.find(Part::Q_BIAS));
    L.k_bias = vec_f32(w.find(Part::K_BIAS));
    L.v_bias = vec_f32(w.find(Part::V_BIAS));
    L.o_bias = vec_f32(w.find(Part::O_BIAS));
    L.sinks = vec_f32(w.find(Part::SINKS));
    L.q_norm = norm_f32(w.find(Part::Q_NORM));
    L.k_norm = norm_f32(w.find(Part::K_NORM));
    L.shared_gate = w.find(Part::SHARED_GATE);
    L.shared_up = w.find(Part::SHARED_UP);
    L.shared_down = w.find(Part::SHARED_DOWN);
    L.shared_expert_gate = w.find(Part::SHARED_EXPERT_GATE);
    if (!L.post_ffn_norm.empty() && w.is_moe() && !shape.moe_beside_mlp)
      throw InputError("the CPU backend has no case for layer " + std::to_string(shape.layer) +
                       "'s norm after an MoE feed-forward (sandwich norms with experts)");
    if (w.is_moe()) {
      L.moe.router = &w.get(Part::ROUTER);
      L.moe.top_k = spec.num_experts_per_tok;
      L.moe.norm_topk_prob = spec.norm_topk_prob;
      if (L.moe.top_k <= 0 || L.moe.top_k > spec.num_experts)
        throw InputError("model config: num_experts_per_tok must be in [1, num_experts]");
      L.moe.gate = w.expert_gate;
      L.moe.up = w.expert_up;
      L.moe.down = w.expert_down;
      L.moe.router_bias = w.find(Part::ROUTER_BIAS);
      L.moe.gate_bias = w.expert_gate_bias;
      L.moe.up_bias = w.expert_up_bias;
      L.moe.down_bias = w.expert_down_bias;
      L.moe.softmax_after_topk = shape.softmax_after_topk;
      L.moe.swiglu_limit = shape.activation == Activation::CLAMPED_SWIGLU ? shape.swiglu_limit : 0.0f;
      L.moe.swiglu_alpha = shape.swiglu_alpha;
      L.moe.score_bias = w.find(Part::ROUTER_SCORE_BIAS);
      L.moe.routed_scale = static_cast<float>(spec.routed_scaling_factor);
      L.moe.relu2 = L.relu2;
      L.latent_in = w.find(Part::MOE_LATENT_IN);
      L.latent_out = w.find(Part::MOE_LATENT_OUT);
      L.moe.gelu_tanh = L.gelu_tanh;
      if (shape.moe_beside_mlp) {
        L.moe_beside_mlp = true;
        L.gate = &w.get(Part::GATE);
        L.up = &w.get(Part::UP);
        L.down = &w.get(Part::DOWN);
        L.moe_norm = norm_f32(w.find(Part::MOE_NORM));
        L.post_mlp_norm = norm_f32(w.find(Part::POST_MLP_NORM));
        L.post_moe_norm = norm_f32(w.find(Part::POST_MOE_NORM));
        L.router_norm = vec_f32(w.find(Part::ROUTER_INPUT_SCALE));
        for (float& v : L.router_norm) v /= std::sqrt(static_cast<float>(H));
        L.moe.expert_scale = vec_f32(w.find(Part::EXPERT_SCALE));
      }
    } else if (shape.ffn) {
      L.gate = w.find(Part::GATE);
      L.up = &w.get(Part::UP);
      L.down = &w.get(Part::DOWN);
    }
    layers_.push_back(std::move(L));
  }
  ones_.assign(size_t(std::max<int64_t>(max_kv_dim_, 1)), 1.0f);
}

// The matmul decodes each weight block once per call and runs up to eight activation rows
// past it in registers (matmul.cpp's few-rows path), and attention reads a sequence's KV
// once for all its rows, so extra rows add only their FMAs: measured on SmolLM2 Q4_1 at 600
// tokens of context, one thread, steps of 2, 4, 5 and 8 rows cost 1.3, 1.9, 2.3 and 3.1
// one-row steps. Four rows is where more stops paying: at 0.93 acceptance 5 rows give 4.3
// tokens for 2.3 step costs and 4 rows 3.6 for 1.9 (1.9 tokens a step cost either way),
// and drafts accepted less often pay less.
constexpr int64_t kRowsAtDecodeCost = 4;
int64_t CpuBackend::rows_at_decode_cost() const { return kRowsAtDecodeCost; }

std::string CpuBackend::describe() const { return "cpu (" + std::to_string(pool_->size()) + " threads)"; }

uint64_t CpuBackend::kv_bytes_per_token(const ModelSpec& spec, LayerRange range, bool sliding_only) {
  return kv_token_size(spec, range, sliding_only).values * sizeof(float);
}

uint64_t CpuBackend::workspace_bytes(const ModelSpec& s, LayerRange range, int64_t max_step_tokens, int64_t max_seqs) {
  // One step holds the residual, the normed input, q/k/v, the attention output and the
  // MLP's gate/up (and the expert router). Attention scratch is not counted: it works in
  // tiles with an online softmax.
  bool any_dense = false, any_moe = false;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) (s.layer_is_moe(l) ? any_moe : any_dense) = true;
  const int64_t ffn = std::max({any_dense ? s.intermediate_size : 0,
                                any_moe ? s.moe_intermediate_size * s.num_experts_per_tok : 0,
                                any_moe ? s.shared_expert_intermediate_size : 0});
  // The output gate's raw q_proj rows; a Gated DeltaNet's projections, conv output and core.
  const ModelSpec::DeltaNet& d = s.delta_net;
  const int64_t gated_q = s.attn_output_gate ? 2 * s.num_heads * s.head_dim : 0;
  // A Mamba-2 layer's in_proj output, conv output and y.
  const int64_t recurrent = !s.has_recurrent_layers() ? 0
                            : s.mamba2_layers()     ? s.mamba2.in_proj_rows() + s.mamba2.conv_dim() + s.mamba2.inner()
                                                    : 2 * d.conv_dim() + 2 * d.value_dim() + 2 * d.num_v_heads;
  // q, k and v of the widest layer (Gemma 4's full layers have wider heads).
  int64_t qkv = 0;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l)
    qkv = std::max(qkv, (s.num_heads + 2 * s.layer_num_kv_heads(l)) * s.layer_head_dim(l));
  // Gemma 4's MoE block: the experts' input and the router's beside the dense MLP's.
  const int64_t beside = s.moe_beside_mlp ? 2 * s.hidden_size : 0;
  const int64_t per_token = 4 * s.hidden_size + qkv + 2 * ffn + (any_moe ? s.num_experts : 0) + gated_q + recurrent + beside;
  uint64_t bytes = uint64_t(std::max<int64_t>(max_step_tokens, 1)) * uint64_t(per_token) * 4;
  // Logits: a row per sequence, or per draft too in a step verifying drafts (speculator.cpp).
  if (range.last_layer == s.num_layers)
    bytes += uint64_t(std::max<int64_t>(max_seqs, kRowsAtDecodeCost)) * uint64_t(s.vocab_size) * 4;
  return bytes;
}

size_t CpuBackend::kv_block_bytes(int64_t block_size) const {
  return size_t(block_size) * kv_bytes_per_token(spec_, range_);
}

void CpuBackend::init_kv_cache(int64_t num_blocks, int64_t block_size) {
  init_windowed_kv_cache(num_blocks, num_blocks, block_size);
}

void CpuBackend::init_windowed_kv_cache(int64_t num_blocks, int64_t num_window_blocks, int64_t block_size) {
  SPARK_CHECK(num_blocks > 0 && block_size > 0, "init_kv_cache: empty cache");
  SPARK_CHECK(num_window_blocks > 0 && num_window_blocks <= num_blocks, "init_kv_cache: window blocks out of range");
  kv_ = {num_blocks, block_size, spec_.num_kv_heads, spec_.head_dim};
  window_blocks_ = num_blocks;  // a stage without sliding layers holds every block in each
  for (const Layer& L : layers_)
    if (L.window > 0) window_blocks_ = num_window_blocks;
  cache_ = std::vector<cpu::LayerKv>(layers_.size());
  for (size_t i = 0; i < cache_.size(); ++i) {
    if (!layers_[i].attends() || layers_[i].reads_model_kv) continue;
    const cpu::KvGeometry g = layer_kv(static_cast<int64_t>(i));
    const size_t n = static_cast<size_t>(g.slots() * g.slot_floats());
    cache_[i].k.allocate(n);
    cache_[i].v.allocate(n);
  }
}

void CpuBackend::init_state_slots(int64_t num_slots) {
  SPARK_CHECK(num_slots >= 0, "init_state_slots: a negative count");
  num_state_slots_ = num_recurrent_ > 0 ? num_slots : 0;
  states_.assign(size_t(num_state_slots_ * num_recurrent_ * spec_.recurrent_state_values()), 0.0f);
}

cpu::KvGeometry CpuBackend::layer_kv(int64_t index) const {
  const Layer& L = layers_[static_cast<size_t>(index)];
  cpu::KvGeometry g = kv_;
  if (L.window > 0) g.num_blocks = window_blocks_;
  g.kv_heads = L.num_kv_heads;
  g.head_dim = L.head_dim;
  return g;
}

void CpuBackend::prepare_states(const Batch& batch) {
  if (num_recurrent_ == 0) return;
  cpu::validate_state_slots(batch, num_state_slots_);
  const auto per_slot = size_t(num_recurrent_ * spec_.recurrent_state_values());
  for (size_t i = 0; i < batch.state_copies.size(); i += 2) {
    const int32_t src = batch.state_copies[i], dst = batch.state_copies[i + 1];
    std::copy_n(states_.begin() + std::ptrdiff_t(size_t(src) * per_slot), per_slot, states_.begin() + std::ptrdiff_t(size_t(dst) * per_slot));
  }
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const int32_t slot = batch.state_slots[size_t(s)];
    if (batch.positions[size_t(batch.query_start[size_t(s)])] == 0)
      std::fill_n(states_.begin() + std::ptrdiff_t(size_t(slot) * per_slot), per_slot, 0.0f);
  }
}

std::vector<float*> CpuBackend::states_of(const Batch& batch, int64_t r) {
  const int64_t values = spec_.recurrent_state_values();
  std::vector<float*> out;
  for (int32_t slot : batch.state_slots) out.push_back(states_.data() + (int64_t(slot) * num_recurrent_ + r) * values);
  return out;
}

void CpuBackend::run_layer(int64_t index, const Batch& batch, float* x) {
  const Layer& L = layers_[static_cast<size_t>(index)];
  if (L.encoder) return run_encoder_layer(index, batch, x);
  const int64_t T = batch.num_tokens(), H = spec_.hidden_size;
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  float* h = h_.data();
  if (L.mixer != Mixer::NONE) {
    pool_->parallel_for(T, 8, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) cpu::rms_norm(x + t * H, L.attn_norm.data(), H, eps, h + t * H);
    });
    if (L.mixer == Mixer::RECURRENT) {
      cpu::delta_net(*pool_, spec_.delta_net, L.delta, eps, batch, states_of(batch, L.state_index), h, delta_scratch_,
                     att_.data());
      std::copy(att_.begin(), att_.begin() + T * H, h);
    } else if (L.mixer == Mixer::MAMBA2) {
      cpu::mamba2(*pool_, spec_.mamba2, L.mamba, eps, batch, states_of(batch, L.state_index), h, mamba_scratch_,
                  att_.data());
      std::copy(att_.begin(), att_.begin() + T * H, h);
    } else {
      attend(index, batch, h);
    }
    if (!L.post_attn_norm.empty())
      pool_->parallel_for(T, 8, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) cpu::rms_norm(h + t * H, L.post_attn_norm.data(), H, eps, h + t * H);
      });
    for (int64_t i = 0; i < T * H; ++i) x[i] += h[i];
  }
  if (L.ffn) {
    pool_->parallel_for(T, 8, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) cpu::rms_norm(x + t * H, L.ffn_norm.data(), H, eps, h + t * H);
    });
    if (L.moe_beside_mlp) dense_beside_experts(L, h, T, x);
    else feed_forward(L, h, T, x);
  }
  if (L.layer_scalar != 1.0f)
    for (int64_t i = 0; i < T * H; ++i) x[i] *= L.layer_scalar;
}

void CpuBackend::attend(int64_t index, const Batch& batch, float* h) {
  const Layer& L = layers_[static_cast<size_t>(index)];
  if (L.reads_model_kv) return attend_model_kv(index, batch, h);
  ThreadPool& pool = *pool_;
  const int64_t T = batch.num_tokens(), H = spec_.hidden_size, hd = L.head_dim;
  const int64_t nh = spec_.num_heads, nkv = L.num_kv_heads;
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  // With an output gate, q_proj yields per head the query and then the gate.
  float* q_out = L.output_gate ? q_gate_.data() : q_.data();
  if (L.v)
    cpu::matmul_many(pool, h, T, {{L.q, q_out}, {L.k, k_.data()}, {L.v, v_.data()}});
  else  // the values are the key projection, before k_norm and RoPE
    cpu::matmul_many(pool, h, T, {{L.q, q_out}, {L.k, k_.data()}});
  pool.parallel_for(T, 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* q = q_.data() + t * nh * hd;
      float* k = k_.data() + t * nkv * hd;
      float* v = v_.data() + t * nkv * hd;
      if (!L.v) std::copy_n(k, nkv * hd, v);
      if (L.v_norm)
        for (int64_t i = 0; i < nkv; ++i) cpu::rms_norm(v + i * hd, ones_.data(), hd, eps, v + i * hd);
      if (L.output_gate)
        for (int64_t i = 0; i < nh; ++i)
          std::copy_n(q_gate_.data() + (t * nh + i) * 2 * hd, hd, q + i * hd);
      if (!L.q_bias.empty()) {
        for (int64_t i = 0; i < nh * hd; ++i) q[i] += L.q_bias[static_cast<size_t>(i)];
        for (int64_t i = 0; i < nkv * hd; ++i) k[i] += L.k_bias[static_cast<size_t>(i)];
        for (int64_t i = 0; i < nkv * hd; ++i) v[i] += L.v_bias[static_cast<size_t>(i)];
      }
      if (!L.q_norm.empty()) {  // Qwen3 normalizes each head before RoPE
        for (int64_t i = 0; i < nh; ++i) cpu::rms_norm(q + i * hd, L.q_norm.data(), hd, eps, q + i * hd);
        for (int64_t i = 0; i < nkv; ++i) cpu::rms_norm(k + i * hd, L.k_norm.data(), hd, eps, k + i * hd);
      }
      if (!L.rope) continue;
      const cpu::Rope& rope = ropes_[L.rope_index];
      rope.apply(q, nh, batch.positions[static_cast<size_t>(t)]);
      rope.apply(k, nkv, batch.positions[static_cast<size_t>(t)]);
    }
  });
  cpu::LayerKv& cache = cache_[static_cast<size_t>(index)];
  const cpu::KvGeometry g = layer_kv(index);
  cpu::write_kv(batch, g, k_.data(), v_.data(), cache);
  cpu::attention(pool, batch, g, nh, q_.data(), cache, att_.data(),
                 {L.window, L.sinks.empty() ? nullptr : L.sinks.data(), /*causal=*/!L.encoder, L.attention_scale});
  if (L.output_gate)
    pool.parallel_for(T, 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        for (int64_t i = 0; i < nh; ++i) {
          const float* gate = q_gate_.data() + (t * nh + i) * 2 * hd + hd;
          float* o = att_.data() + (t * nh + i) * hd;
          for (int64_t j = 0; j < hd; ++j) o[j] *= 1.0f / (1.0f + std::exp(-gate[j]));
        }
    });
  cpu::matmul(pool, att_.data(), T, *L.o, h);
  if (!L.o_bias.empty())
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < H; ++i) h[t * H + i] += L.o_bias[static_cast<size_t>(i)];
}

void CpuBackend::run_encoder_layer(int64_t index, const Batch& batch, float* x) {
  const Layer& L = layers_[static_cast<size_t>(index)];
  ThreadPool& pool = *pool_;
  const int64_t T = batch.num_tokens(), H = spec_.hidden_size, I = L.up->rows();
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  float* h = h_.data();
  std::copy(x, x + T * H, h);
  attend(index, batch, h);
  pool.parallel_for(T, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      for (int64_t i = 0; i < H; ++i) x[t * H + i] += h[t * H + i];
      cpu::layer_norm(x + t * H, L.attn_norm.data(), L.attn_norm_bias.data(), H, eps, x + t * H);
    }
  });
  cpu::matmul(pool, x, T, *L.up, gate_.data());
  pool.parallel_for(T, 4, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* row = gate_.data() + t * I;
      for (int64_t i = 0; i < I; ++i) row[i] += L.up_bias[static_cast<size_t>(i)];
      cpu::gelu(row, I, row);
    }
  });
  cpu::matmul(pool, gate_.data(), T, *L.down, h);
  pool.parallel_for(T, 8, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      for (int64_t i = 0; i < H; ++i) x[t * H + i] += h[t * H + i] + L.down_bias[static_cast<size_t>(i)];
      cpu::layer_norm(x + t * H, L.ffn_norm.data(), L.ffn_norm_bias.data(), H, eps, x + t * H);
    }
  });
}

void CpuBackend::embed_encoder_input(const Batch& batch, float* x) {
  const int64_t T = batch.num_tokens(), H = spec_.hidden_size;
  const auto eps = static_cast<float>(spec_.rms_norm_eps);
  std::vector<float> pos(static_cast<size_t>(H));
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = batch.token_ids[static_cast<size_t>(t)];
    const int64_t p = spec_.position_offset + batch.positions[static_cast<size_t>(t)];
    SPARK_CHECK(id >= 0 && id < spec_.vocab_size, "token id outside the vocabulary: admission checks prompts");
    SPARK_CHECK(p < spec_.position_rows, "a position past the encoder's table: admission caps prompts at its context");
    float* row = x + t * H;
    cpu::decode_row(*embedding_, id, row);
    cpu::decode_row(*pos_embedding_, p, pos.data());
    for (int64_t i = 0; i < H; ++i) row[i] += pos[static_cast<size_t>(i)] + type0_[static_cast<size_t>(i)];
    cpu::layer_norm(row, embed_norm_.data(), embed_norm_bias_.data(), H, eps, row);
  }
}

void CpuBackend::feed_forward(const Layer& L, float* h, int64_t T, float* x) {
  ThreadPool& pool = *pool_;
  const int64_t H = spec_.hidden_size;
  if (L.moe.router) {
    if (L.latent_in) {
      // LatentMoE: routed on h, the experts run on its latent projection and their sum goes
      // back out to the hidden width.
      const int64_t latent = L.latent_in->rows();
      std::vector<float> xl(static_cast<size_t>(T * latent)), yl(static_cast<size_t>(T * latent));
      cpu::matmul(pool, h, T, *L.latent_in, xl.data());
      cpu::moe_ffn(pool, L.moe, xl.data(), T, latent, yl.data(), h);
      cpu::matmul(pool, yl.data(), T, *L.latent_out, att_.data());
    } else {
      cpu::moe_ffn(pool, L.moe, h, T, H, att_.data());
    }
    for (int64_t i = 0; i < T * H; ++i) x[i] += att_[static_cast<size_t>(i)];
    if (L.shared_up && !L.shared_expert_gate) {  // beside a sigmoid router: relu^2, added as it is
      const int64_t I = L.shared_up->rows();
      cpu::matmul(pool, h, T, *L.shared_up, up_.data());
      cpu::relu2(up_.data(), T * I, up_.data());
      cpu::matmul(pool, up_.data(), T, *L.shared_down, att_.data());
      for (int64_t i = 0; i < T * H; ++i) x[i] += att_[static_cast<size_t>(i)];
      return;
    }
    if (!L.shared_gate) return;
    // The shared expert, scaled per token by sigmoid(shared_expert_gate . h).
    const int64_t I = L.shared_gate->rows();
    cpu::matmul_many(pool, h, T, {{L.shared_gate, gate_.data()}, {L.shared_up, up_.data()}});
    cpu::silu_mul(gate_.data(), up_.data(), T * I, gate_.data());
    cpu::matmul(pool, gate_.data(), T, *L.shared_down, att_.data());
    std::vector<float> scale(static_cast<size_t>(T));
    cpu::matmul(pool, h, T, *L.shared_expert_gate, scale.data());
    for (int64_t t = 0; t < T; ++t) {
      const float g = 1.0f / (1.0f + std::exp(-scale[static_cast<size_t>(t)]));
      for (int64_t i = 0; i < H; ++i) x[t * H + i] += g * att_[static_cast<size_t>(t * H + i)];
    }
    return;
  }
  const int64_t I = L.up->rows();
  if (L.relu2) {
    cpu::matmul(pool, h, T, *L.up, gate_.data());
    cpu::relu2(gate_.data(), T * I, gate_.data());
  } else {
    cpu::matmul_many(pool, h, T, {{L.gate, gate_.data()}, {L.up, up_.data()}});
    pool.parallel_for(T, 4, [&](int64_t b, int64_t e) {
      if (L.gelu_tanh)
        cpu::gelu_tanh_mul(gate_.data() + b * I, up_.data() + b * I, (e - b) * I, gate_.data() + b * I);
      else
        cpu::silu_mul(gate_.data() + b * I, up_.data() + b * I, (e - b) * I, gate_.data() + b * I);
    });
  }
  cpu::matmul(pool, gate_.data(), T, *L.down, h);
  if (!L.post_ffn_norm.empty()) {
    const auto eps = static_cast<float>(spec_.rms_norm_eps);
    pool.parallel_for(T, 8, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) cpu::rms_norm(h + t * H, L.post_ffn_norm.data(), H, eps, h + t * H);
    });
  }
  for (int64_t i = 0; i < T * H; ++i) x[i] += h[i];
}

void CpuBackend::dense_beside_experts(const Layer& L, float* h, int64_t T, float* x) {
  ThreadPool& pool = *pool_;
  const int64_t H = spec_.hidden_size, I = L.up->rows();
  const auto eps = static_cast<float>(spec_.rms_norm_eps);
  auto norm_rows = [&](const float* in, const std::vector<float>& w, float* out) {
    pool.parallel_for(T, 8, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) cpu::rms_norm(in + t * H, w.data(), H, eps, out + t * H);
    });
  };
  // The dense MLP on FFN_NORM(x), normed: into h.
  cpu::matmul_many(pool, h, T, {{L.gate, gate_.data()}, {L.up, up_.data()}});
  pool.parallel_for(T, 4, [&](int64_t b, int64_t e) {
    cpu::gelu_tanh_mul(gate_.data() + b * I, up_.data() + b * I, (e - b) * I, gate_.data() + b * I);
  });
  cpu::matmul(pool, gate_.data(), T, *L.down, h);
  norm_rows(h, L.post_mlp_norm, h);
  // The experts on MOE_NORM(x), routed on x's own norm times the router's scale, normed: into att_.
  norm_rows(x, L.moe_norm, moe_in_.data());
  norm_rows(x, L.router_norm, route_in_.data());
  cpu::moe_ffn(pool, L.moe, moe_in_.data(), T, H, att_.data(), route_in_.data());
  norm_rows(att_.data(), L.post_moe_norm, att_.data());
  for (int64_t i = 0; i < T * H; ++i) h[i] += att_[static_cast<size_t>(i)];
  norm_rows(h, L.post_ffn_norm, h);
  for (int64_t i = 0; i < T * H; ++i) x[i] += h[i];
}

// An MTP head's layer input, row by row: fc([norm(embedding of the row's token);
// norm(the model's hidden state the row comes with)]).
void CpuBackend::embed_mtp_input(const Batch& batch, const float* hidden_in, float* x) {
  if (!hidden_in) throw InputError("an MTP head runs on the model's hidden states, and none came with the batch");
  const int64_t T = batch.num_tokens(), H = spec_.hidden_size;
  const auto eps = static_cast<float>(spec_.rms_norm_eps);
  grow(mtp_in_, T * 2 * H);
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = batch.token_ids[static_cast<size_t>(t)];
    SPARK_CHECK(id >= 0 && id < spec_.vocab_size, "token id outside the vocabulary: admission checks prompts");
    float* row = mtp_in_.data() + t * 2 * H;
    cpu::decode_row(*embedding_, id, x + t * H);
    cpu::rms_norm(x + t * H, mtp_embed_norm_.data(), H, eps, row);
    cpu::rms_norm(hidden_in + t * H, mtp_hidden_norm_.data(), H, eps, row + H);
  }
  cpu::matmul(*pool_, mtp_in_.data(), T, *mtp_fc_, x);
}

void CpuBackend::forward(const Batch& batch, const float* hidden_in, ForwardResult& out) {
  SPARK_CHECK(!cache_.empty(), "forward before init_kv_cache");
  cpu::validate_batch(batch, kv_);
  if (window_blocks_ < kv_.num_blocks) check_window_blocks(batch, window_blocks_, kv_.block_size, spec_.sliding_window);
  prepare_states(batch);
  for (size_t l = 0; l < layers_.size(); ++l)  // sliding layers hold no full-only blocks
    if (layers_[l].window == 0 && layers_[l].attends())
      cpu::copy_blocks(batch.block_copies, layer_kv(int64_t(l)), cache_[l]);
  const int64_t T = batch.num_tokens(), H = spec_.hidden_size;
  out.logits.clear();
  out.hidden.clear();
  out.final_hidden.clear();
  if (T == 0) return;

  const ModelSpec::DeltaNet& d = spec_.delta_net;
  const int64_t qkv = std::max(max_q_dim_, max_kv_dim_);
  const int64_t inter = std::max(spec_.intermediate_size, spec_.shared_expert_intermediate_size);
  grow(x_, T * H);
  grow(h_, T * H);
  grow(q_, T * max_q_dim_);
  if (spec_.attn_output_gate) grow(q_gate_, T * 2 * max_q_dim_);
  grow(k_, T * max_kv_dim_);
  grow(v_, T * max_kv_dim_);
  grow(att_, T * std::max({qkv, H, d.value_dim()}));  // a Mamba-2 layer's output is H wide
  if (spec_.moe_beside_mlp) {
    grow(moe_in_, T * H);
    grow(route_in_, T * H);
  }
  grow(gate_, T * inter);
  grow(up_, T * inter);

  float* x = x_.data();
  if (spec_.is_assistant()) {
    embed_assistant_input(batch, hidden_in, x);
  } else if (mtp_fc_) {
    embed_mtp_input(batch, hidden_in, x);
  } else if (spec_.encoder && !hidden_in) {
    embed_encoder_input(batch, x);
  } else if (hidden_in) {
    std::copy(hidden_in, hidden_in + T * H, x);
  } else {
    if (!has_embedding_) throw InputError("this pipeline stage needs hidden states from the previous stage");
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = batch.token_ids[static_cast<size_t>(t)];
      SPARK_CHECK(id >= 0 && id < spec_.vocab_size, "token id outside the vocabulary: admission checks prompts");
      cpu::decode_row(*embedding_, id, x + t * H);
    }
    if (spec_.scale_embedding) {
      // Gemma's normalizer sqrt(hidden_size), in f32. transformers multiplies by it rounded to
      // the embedding's dtype (in BF16, sqrt(2560) = 50.596 becomes 50.5); its f32 runs, which
      // the golden logits are, use it unrounded, as here.
      const auto normalizer = static_cast<float>(std::sqrt(static_cast<double>(H)));
      for (int64_t i = 0; i < T * H; ++i) x[i] *= normalizer;
    }
  }
  for (int64_t l = 0; l < static_cast<int64_t>(layers_.size()); ++l) run_layer(l, batch, x);

  if (spec_.encoder) {  // no final norm and no LM head: the wanted rows as they are
    out.final_hidden.resize(batch.hidden_rows.size() * static_cast<size_t>(H));
    for (size_t r = 0; r < batch.hidden_rows.size(); ++r)
      std::copy_n(x + batch.hidden_rows[r] * H, H, out.final_hidden.data() + r * size_t(H));
    return;
  }
  if (!has_head_) {
    out.hidden.assign(x, x + T * H);
    return;
  }
  // Only the wanted rows go through the final norm, and the logits rows through the
  // (large) LM head.
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  out.final_hidden.resize(batch.hidden_rows.size() * static_cast<size_t>(H));
  for (size_t r = 0; r < batch.hidden_rows.size(); ++r)
    cpu::rms_norm(x + batch.hidden_rows[r] * H, final_norm_.data(), H, eps, out.final_hidden.data() + r * size_t(H));
  if (spec_.is_assistant()) assistant_hidden(out.final_hidden.data(), int64_t(batch.hidden_rows.size()), out.final_hidden);
  const int64_t R = static_cast<int64_t>(batch.logits_rows.size());
  if (R == 0) return;
  float* h = h_.data();
  for (int64_t r = 0; r < R; ++r)
    cpu::rms_norm(x + batch.logits_rows[static_cast<size_t>(r)] * H, final_norm_.data(), H, eps, h + r * H);
  out.logits.resize(static_cast<size_t>(R * spec_.vocab_size));
  if (centroids_) clustered_logits(h, R, out.logits.data());
  else cpu::matmul(*pool_, h, R, *lm_head_, out.logits.data());
  if (spec_.final_logit_softcap > 0) {
    const auto cap = static_cast<float>(spec_.final_logit_softcap);
    for (float& v : out.logits) v = std::tanh(v / cap) * cap;
  }
}

}  // namespace spark
