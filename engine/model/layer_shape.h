// layer_shape.h — what each decoder layer computes, in one description per layer that both
// backends build their layers from. An architecture says what its layers are through the
// ModelSpec; a backend lists the cases it implements (LayerCases) and refuses, by layer
// and by name, a layer that needs one it lacks — a model that needs something new fails
// at load with what is missing, never with wrong numbers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark {

// How a residual branch is normalised: x + f(norm(x)) ("pre") is the decoders'; Gemma's
// "sandwich" also normalises f's output before adding it; encoders' "post" is norm(x + f(x)).
enum class NormPlacement : uint8_t { PRE, SANDWICH, POST };
// RMSNorm as x / rms(x) * w, Gemma's x / rms(x) * (1 + w), or LayerNorm with a bias.
enum class NormKind : uint8_t { RMS, RMS_PLUS_ONE, LAYER };
// The MLP's activation: SiLU(gate) * up, gpt-oss's clamped gate * sigmoid(alpha * gate) *
// (up + 1), Gemma's GELU (tanh) gate, Nemotron-H's ungated relu(up)^2, or encoders' ungated
// exact GELU(up x + b) with biased projections.
enum class Activation : uint8_t { SILU, CLAMPED_SWIGLU, GELU_TANH, RELU2, GELU };
// Which token mixer the layer has: attention over the paged KV cache, a recurrent state
// (the Gated DeltaNet of Qwen3.5/3.6, the Mamba-2 of Nemotron-H), or none (a Nemotron-H
// feed-forward block).
enum class Mixer : uint8_t { ATTENTION, RECURRENT, MAMBA2, NONE };

const char* name_of(NormPlacement p);
const char* name_of(NormKind k);
const char* name_of(Activation a);
const char* name_of(Mixer m);

struct LayerShape {
  int64_t layer = 0;  // index in the whole model
  Mixer mixer = Mixer::ATTENTION;
  NormPlacement norm_placement = NormPlacement::PRE;
  NormKind norm_kind = NormKind::RMS;
  double norm_eps = 1e-6;

  // Attention geometry; queries are scaled by attention_scale before the softmax.
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  double attention_scale = 1.0;
  bool qk_norm = false;
  bool sinks = false;   // a learned per-head logit joins each softmax
  int64_t window = 0;   // attends to the last `window` tokens; 0 for the whole context
  // RoPE: the base, its scaling, and how many of each head's dimensions rotate.
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t rotary_dim = 0;
  bool rope = true;          // false: attention without positions (Nemotron-H)
  bool output_gate = false;  // the attention output times sigmoid(a gate q_proj also yields)
  // Every token of a sequence attends to all of its tokens (encoders); causal otherwise.
  bool bidirectional = false;
  // Gemma 4: values normed per head by an RMSNorm without a weight; no v_proj, the values
  // being the key projection (k_eq_v); the layer's output times LAYER_SCALAR.
  bool v_norm = false;
  bool k_eq_v = false;
  bool layer_scalar = false;
  // Gemma 4's assistant (ModelSpec::assistant_of_hidden): queries only, over the K and V the
  // model's last layer of this layer's type holds; it stores none. Its sliding layers see
  // window - 1 tokens before the drafted position: those the model's next query reads, so
  // the model's window cache holds them for sure.
  bool reads_model_kv = false;

  // The MLP: dense, or experts chosen by a router; none in a Nemotron-H mixer block.
  bool ffn = true;
  bool moe = false;
  Activation activation = Activation::SILU;
  float swiglu_limit = 0.0f, swiglu_alpha = 1.702f;  // CLAMPED_SWIGLU only
  bool softmax_after_topk = false;                   // the router's softmax over the chosen k only
  bool shared_expert = false;  // an always-on expert beside the routed ones, sigmoid-gated
  // Nemotron-H: sigmoid scores, a correction bias to choose by, scaled weights.
  bool sigmoid_router = false;
  // Gemma 4: the dense MLP beside the experts (ModelSpec::moe_beside_mlp).
  bool moe_beside_mlp = false;

  // K and V values one token stores in this layer's cache.
  int64_t kv_values_per_token() const {
    return mixer == Mixer::ATTENTION && !reads_model_kv ? 2 * num_kv_heads * head_dim : 0;
  }
  bool attends() const { return mixer == Mixer::ATTENTION; }
};

// The layers of `range`, in order.
std::vector<LayerShape> layer_shapes(const ModelSpec& spec, LayerRange range);
// The recurrent state one sequence holds in the recurrent layers of `range` (f32 bytes).
uint64_t recurrent_state_bytes(const ModelSpec& spec, LayerRange range);
// What one token keeps in the KV cache of the layers of `range` (of their sliding layers
// only, with sliding_only): K and V values, 2 x kv heads x head_dim a layer, and kv heads,
// 2 x kv heads a layer (an FP8 cache keeps a scale per head). Layers may differ (Gemma 4).
struct KvTokenSize {
  uint64_t values = 0;
  uint64_t heads = 0;
};
KvTokenSize kv_token_size(const ModelSpec& spec, LayerRange range, bool sliding_only = false);

// What a backend implements. A case outside it is refused by require_cases.
struct LayerCases {
  std::string backend;  // "the CPU backend"
  std::vector<Mixer> mixers = {Mixer::ATTENTION};
  std::vector<NormPlacement> norm_placements = {NormPlacement::PRE};
  std::vector<NormKind> norm_kinds = {NormKind::RMS};
  std::vector<Activation> activations = {Activation::SILU, Activation::CLAMPED_SWIGLU};
  // Cases a backend may lack, each refused by name: attention geometry (heads, kv heads,
  // head_dim) that varies by layer; a RoPE (base or scaling) other than the model's on some
  // layers (Gemma 3's sliding layers); partial rotary; a scale other than 1/sqrt(head_dim).
  bool per_layer_geometry = false;
  bool per_layer_rope = false;
  bool partial_rotary = false;
  bool custom_attention_scale = false;
  bool output_gate = false;
  bool shared_expert = false;
  bool no_rope = false;           // attention without RoPE
  bool ffn_less_layers = false;   // layers of a token mixer only
  bool sigmoid_router = false;
  bool bidirectional = false;     // attention without the causal mask (encoders)
  bool v_norm = false;            // Gemma 4's weightless value norm
  bool k_eq_v = false;            // values from the key projection
  bool layer_scalar = false;      // the layer's output times a scalar
  bool moe_beside_mlp = false;    // Gemma 4's MoE block
  bool reads_model_kv = false;    // Gemma 4's assistant
  // Around the layers (the ModelSpec's, not a layer's): the embedding times sqrt(hidden_size),
  // and logits capped by tanh (Gemma).
  bool embedding_scale = false;
  bool logit_softcap = false;
};

// Throws InputError naming the backend, the first layer and the case it lacks, e.g.
// "the CPU backend has no case for layer 5's norm placement 'sandwich'".
void require_cases(const std::vector<LayerShape>& layers, const ModelSpec& spec, const LayerCases& cases);

}  // namespace spark
