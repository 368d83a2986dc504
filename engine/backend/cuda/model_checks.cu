// model_checks.cu — the CUDA backend's refusals (model_checks.h): the sizes its DeltaNet,
// Mamba-2 and MoE kernels take, and the layer cases it implements.
#include "engine/backend/cuda/model_checks.h"

#include <algorithm>
#include <string>

#include "engine/backend/cuda/delta_net.h"
#include "engine/backend/cuda/mamba2.h"
#include "engine/backend/cuda/moe.h"
#include "engine/backend/cuda/step_buffers.h"
#include "engine/util/check.h"

namespace spark::cuda {
namespace {

// What the DeltaNet kernels take (delta_net.h), as an InputError naming the config fields.
void check_delta_net_config(const ModelSpec& s) {
  const ModelSpec::DeltaNet& d = s.delta_net;
  auto dim_ok = [](int64_t v) { return v > 0 && v % 8 == 0 && v <= kDeltaNetMaxHeadDim; };
  if (!dim_ok(d.k_head_dim) || !dim_ok(d.v_head_dim) || d.conv_kernel < 1 || d.conv_kernel > kDeltaNetMaxConvKernel ||
      d.num_k_heads < 1 || d.num_v_heads % d.num_k_heads != 0)
    throw InputError("model config: linear_key_head_dim = " + std::to_string(d.k_head_dim) +
                     ", linear_value_head_dim = " + std::to_string(d.v_head_dim) + ", linear_conv_kernel_dim = " +
                     std::to_string(d.conv_kernel) + "; the CUDA backend takes head dims that are multiples of 8 up to " +
                     std::to_string(kDeltaNetMaxHeadDim) + ", a kernel of 1 to " +
                     std::to_string(kDeltaNetMaxConvKernel) +
                     " taps, and value heads a multiple of key heads");
}

// What the Mamba-2 kernels take (mamba2.h), as an InputError naming the config fields.
void check_mamba2_config(const ModelSpec& s) {
  const ModelSpec::Mamba2& m = s.mamba2;
  if (m.head_dim < 1 || m.head_dim > kMamba2MaxHeadDim || m.state_size < 1 ||
      m.state_size > kMamba2MaxStateSize || m.n_groups < 1 || m.num_heads % m.n_groups != 0 ||
      m.conv_kernel < 1 || m.conv_kernel > kMamba2MaxConvKernel ||
      m.inner() / m.n_groups > kMamba2MaxGroupSize || m.inner() % 8 != 0)
    throw InputError("model config: mamba_head_dim = " + std::to_string(m.head_dim) + ", ssm_state_size = " +
                     std::to_string(m.state_size) + ", mamba_num_heads = " + std::to_string(m.num_heads) +
                     ", n_groups = " + std::to_string(m.n_groups) + ", conv_kernel = " + std::to_string(m.conv_kernel) +
                     "; the CUDA backend takes a head dim of 1 to " + std::to_string(kMamba2MaxHeadDim) +
                     ", a state of 1 to " + std::to_string(kMamba2MaxStateSize) +
                     ", heads a multiple of the groups, a kernel of 1 to " +
                     std::to_string(kMamba2MaxConvKernel) + " taps, norm groups of at most " +
                     std::to_string(kMamba2MaxGroupSize) + " channels and heads x head dim a multiple of 8");
}

// What the device MoE kernels take (moe_router.h, moe_experts.h), as InputErrors naming
// the config field.
void check_moe_config(const ModelSpec& s) {
  auto fail = [&](const std::string& m) { throw InputError("model config: " + m + " (" + s.architecture + ")"); };
  if (s.num_experts < 1 || s.num_experts > kMoeMaxExperts)
    fail("num_experts = " + std::to_string(s.num_experts) + "; the CUDA backend takes 1 to " +
         std::to_string(kMoeMaxExperts) + " experts");
  if (s.num_experts_per_tok < 1 || s.num_experts_per_tok > std::min<int64_t>(s.num_experts, kMoeMaxTopK))
    fail("num_experts_per_tok = " + std::to_string(s.num_experts_per_tok) + " must be in [1, num_experts = " +
         std::to_string(s.num_experts) + "] and at most " + std::to_string(kMoeMaxTopK));
  // The experts' width: LatentMoE's (Nemotron-3-Super), or the hidden size. The packed
  // formats ask more of their rows themselves (Q8_0 32 values a block, K-quants 256).
  const int64_t width = s.moe_latent_size > 0 ? s.moe_latent_size : s.hidden_size;
  const std::string width_key = s.moe_latent_size > 0 ? "moe_latent_size" : "hidden_size";
  if (s.moe_intermediate_size <= 0 || s.moe_intermediate_size % 16 || width % 16)
    fail("moe_intermediate_size = " + std::to_string(s.moe_intermediate_size) + " and " + width_key + " = " +
         std::to_string(width) + " must be positive multiples of 16 for the CUDA MoE kernels");
}

}  // namespace

std::vector<LayerShape> checked_layer_shapes(const ModelSpec& spec, LayerRange r) {
  if (spec.hidden_size <= 0 || spec.head_dim <= 0 || spec.num_heads <= 0 || spec.num_kv_heads <= 0 ||
      spec.num_heads % spec.num_kv_heads != 0 || spec.vocab_size <= 0)
    throw InputError(
        "model config: hidden_size, head_dim, num_heads, num_kv_heads and vocab_size must be positive "
        "and num_heads a multiple of num_kv_heads");
  if (r.first_layer < 0 || r.last_layer > spec.num_layers || r.first_layer >= r.last_layer)
    throw InputError("layer range [" + std::to_string(r.first_layer) + ", " + std::to_string(r.last_layer) +
                     ") does not fit a model of " + std::to_string(spec.num_layers) + " layers");
  if (spec.hidden_size % 8 || spec.intermediate_size % 8 || (spec.num_heads * spec.head_dim) % 8)
    throw InputError(
        "the CUDA backend needs hidden_size, intermediate_size and num_heads x head_dim to be "
        "multiples of 8");
  std::vector<LayerShape> shapes = layer_shapes(spec, r);
  require_cases(shapes, spec,
                LayerCases{.backend = "the CUDA backend",
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
  if (range_has(spec, r, &ModelSpec::layer_is_moe)) check_moe_config(spec);
  if (std::any_of(shapes.begin(), shapes.end(),
                  [](const LayerShape& l) { return l.mixer == Mixer::RECURRENT || l.mixer == Mixer::MAMBA2; }))
    spec.mamba2_layers() ? check_mamba2_config(spec) : check_delta_net_config(spec);
  return shapes;
}

}  // namespace spark::cuda
