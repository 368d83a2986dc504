// nemotron_h_gguf.cpp — Nemotron-H as llama.cpp's converter writes it (nemotron_h, and
// nemotron_h_moe for checkpoints with experts). llama.cpp keeps no pattern string: a layer's
// kind is in two per-layer arrays, attention.head_count_kv (0 but on attention layers) and
// feed_forward_length (0 but on feed-forward layers), a layer with neither being Mamba-2.
// A feed-forward layer with a router (ffn_gate_inp) is an MoE, one without a dense MLP:
// llama.cpp's loader decides by expert_count alone (every feed-forward layer of a file with
// experts is an MoE), which the router's presence reads the same for every file it writes,
// and reads a pattern mixing both too. The Mamba-2 sizes come from ssm.*: time_step_rank
// heads of inner_size / time_step_rank, group_count groups, state_size, conv_kernel.
// What the converter changed and this file undoes: ssm_a holds A = -exp(A_log), ssm_a and
// ssm_d are [heads, 1], ssm_norm [groups, inner / groups], ssm_conv1d squeezed to
// [channels, kernel] (the shared GGUF reader puts that 1 back), and every block's norm is
// attn_norm. It also interleaves each head's Q and K rows as for RoPE; Nemotron-H has no
// RoPE, so the scores would not change, but the loader puts them back anyway
// (gguf_qk_rows_permuted) so the weights are the checkpoint's.
#include "engine/model/arch/nemotron_h_gguf.h"

#include <cmath>
#include <memory>
#include <utility>

#include "engine/model/arch.h"
#include "engine/model/arch/shared_keys.h"
#include "engine/util/log.h"

namespace spark {
namespace {

// The one nonzero value `values` holds on the layers of `kind` (0 when there are none), or
// the key is refused: the model description has one of each.
int64_t one_value(const GgufMetaReader& m, const std::string& key, const std::vector<int64_t>& values,
                  const std::string& pattern, char kind) {
  int64_t first = -1;
  for (size_t l = 0; l < pattern.size(); ++l) {
    if (pattern[l] != kind) continue;
    if (first >= 0 && values[l] != values[size_t(first)])
      m.fail(m.arch + "." + key, "is " + std::to_string(values[size_t(first)]) + " at layer " + std::to_string(first) +
                                     " but " + std::to_string(values[l]) + " at layer " + std::to_string(l) +
                                     "; layers of one kind must have one width");
    if (first < 0) first = int64_t(l);
  }
  return first < 0 ? 0 : values[size_t(first)];
}

void read_mamba2(const GgufMetaReader& m, ModelSpec& s, int64_t first_mamba_layer) {
  ModelSpec::Mamba2& x = s.mamba2;
  x.num_heads = m.integer("ssm.time_step_rank", 1, MAX_DIM);
  x.n_groups = m.integer("ssm.group_count", 1, MAX_DIM);
  x.state_size = m.integer("ssm.state_size", 1, MAX_DIM);
  x.conv_kernel = m.integer("ssm.conv_kernel", 2, 64);
  const int64_t inner = m.integer("ssm.inner_size", 1, MAX_DIM);
  if (inner % x.num_heads != 0)
    m.fail(m.arch + ".ssm.inner_size", "= " + std::to_string(inner) + " is not a multiple of ssm.time_step_rank = " +
                                           std::to_string(x.num_heads) + " (the Mamba-2 heads)");
  x.head_dim = inner / x.num_heads;
  if (x.num_heads % x.n_groups != 0)
    m.fail(m.arch + ".ssm.group_count", "= " + std::to_string(x.n_groups) + " must divide ssm.time_step_rank = " +
                                            std::to_string(x.num_heads) + " (the Mamba-2 heads)");
  if (x.conv_dim() > MAX_DIM || x.num_heads * x.head_dim * x.state_size > (int64_t(1) << 26))
    m.fail(m.arch + ".ssm.inner_size", "x ssm.state_size is implausibly large");
  // llama.cpp's conv bias is optional: the first Mamba layer says whether there is one.
  x.conv_bias = m.f.find_tensor(gguf_tensor_name(Part::SSM_CONV_BIAS, first_mamba_layer)) != nullptr;
  // GGUF keeps neither: transformers' NemotronHConfig defaults, which a config.json
  // without them reads as too (nemotron_h.cpp), so both copies of a model compute alike.
  x.chunk_size = 128;
  x.dt_min = 0.001;
}

void read_experts(const GgufMetaReader& m, ModelSpec& s) {
  s.num_experts = m.integer("expert_count", 1, MAX_EXPERTS);
  s.num_experts_per_tok = m.integer("expert_used_count", 1, s.num_experts);
  s.moe_intermediate_size = m.integer("expert_feed_forward_length", 1, MAX_DIM);
  s.shared_expert_intermediate_size = m.integer("expert_shared_feed_forward_length", 0, MAX_DIM, 0);
  if (m.integer("expert_shared_count", 0, 1, 1) == 0) s.shared_expert_intermediate_size = 0;
  // llama.cpp's defaults when absent: no renormalisation, no scale.
  s.norm_topk_prob = m.f.get_bool(m.arch + ".expert_weights_norm").value_or(false);
  s.routed_scaling_factor = m.number("expert_weights_scale", 1.0);
  if (!(s.routed_scaling_factor > 0)) m.fail(m.arch + ".expert_weights_scale", "must be positive");
  if (m.integer("expert_group_count", 0, MAX_EXPERTS, 1) > 1)
    m.fail(m.arch + ".expert_group_count", "above 1 (group-limited routing) is not supported");
  s.moe_latent_size = m.integer("moe_latent_size", 0, MAX_DIM, 0);
  s.decoder_sparse_step = 1;
  s.sigmoid_router = true;
}

// The Mamba-2 parts llama.cpp names as the DeltaNet's (ssm_conv1d, ssm_a, ssm_dt, ssm_norm,
// ssm_out), which the shared GGUF reader therefore files under the DeltaNet's names.
constexpr std::pair<Part, Part> kSharedSsmNames[] = {{Part::LIN_CONV, Part::SSM_CONV},
                                                     {Part::LIN_A_LOG, Part::SSM_A_LOG},
                                                     {Part::LIN_DT_BIAS, Part::SSM_DT_BIAS},
                                                     {Part::LIN_NORM, Part::SSM_NORM},
                                                     {Part::LIN_OUT, Part::SSM_OUT}};

// A_log from llama.cpp's -exp(A_log), into a buffer `keep` holds.
Tensor a_log_from_ssm_a(const Tensor& ssm_a, Weights& keep, const std::string& source) {
  if (ssm_a.dtype != DType::F32)
    throw InputError(source + ": tensor '" + ssm_a.name + "' (ssm_a) is " + std::string(dtype_name(ssm_a.dtype)) +
                     "; llama.cpp writes it in F32");
  auto buf = std::make_shared<std::vector<uint8_t>>(ssm_a.nbytes);
  const auto* src = static_cast<const float*>(ssm_a.data);
  auto* dst = reinterpret_cast<float*>(buf->data());
  for (size_t i = 0; i < ssm_a.nbytes / 4; ++i) {
    if (!(src[i] < 0) || !std::isfinite(src[i]))
      throw InputError(source + ": tensor '" + ssm_a.name + "' (ssm_a, -exp(A_log)) holds " + std::to_string(src[i]) +
                       "; every value must be negative");
    dst[i] = std::log(-src[i]);
  }
  Tensor t = ssm_a;
  t.data = buf->data();
  keep.own(t.name, std::move(buf));
  return t;
}

}  // namespace

void read_nemotron_h_gguf(const GgufMetaReader& m, ModelSpec& s) {
  const int64_t blocks = s.num_layers;
  // The converter appends an MTP block after the model's layers; it is not read.
  const int64_t mtp_blocks = m.integer("nextn_predict_layers", 0, blocks - 1, 0);
  s.num_layers -= mtp_blocks;
  if (mtp_blocks > 0)
    log_info("model: the file's MTP block (", m.arch, ".nextn_predict_layers = ", mtp_blocks,
             ") is not read; speculative = \"mtp\" reads Nemotron-H's head from its Hugging Face checkpoint");
  const std::vector<int64_t> kv = gguf_per_layer(m, "attention.head_count_kv", blocks, s.num_heads);
  const std::vector<int64_t> ff = gguf_per_layer(m, "feed_forward_length", blocks, MAX_DIM);
  s.no_rope = true;
  s.relu2_mlp = true;

  std::string pattern;
  for (int64_t l = 0; l < s.num_layers; ++l) {
    const auto i = size_t(l);
    if (kv[i] > 0 && ff[i] > 0)
      m.fail(m.arch + ".attention.head_count_kv", "and feed_forward_length are both set at layer " + std::to_string(l) +
                                                      "; a Nemotron-H block is attention or a feed-forward, not both");
    const bool router =
        m.f.find_tensor(gguf_tensor_name(Part::ROUTER, l)) || m.f.find_tensor(gguf_tensor_name(Part::EXPERT_UP, l));
    pattern += kv[i] > 0 ? '*' : ff[i] == 0 ? 'M' : router ? 'E' : '-';
  }
  set_nemotron_h_pattern(s, pattern);
  if (const int64_t heads = one_value(m, "attention.head_count_kv", kv, pattern, '*'); heads > 0) {
    if (s.num_heads % heads != 0)
      m.fail(m.arch + ".attention.head_count_kv",
             "= " + std::to_string(heads) + " must divide head_count = " + std::to_string(s.num_heads));
    s.num_kv_heads = heads;
  }
  s.intermediate_size = one_value(m, "feed_forward_length", ff, pattern, '-');
  if (const size_t mamba = pattern.find('M'); mamba != std::string::npos) read_mamba2(m, s, int64_t(mamba));
  if (pattern.find('E') != std::string::npos) read_experts(m, s);
}

std::map<std::string, Tensor> convert_nemotron_h_gguf(const std::map<std::string, Tensor>& file, const ModelSpec& spec,
                                                      LayerRange range, Weights* keep, const std::string& source) {
  std::map<std::string, Tensor> out = file;
  auto rename = [&](const std::string& from, const std::string& to) {
    auto node = out.extract(from);
    if (node.empty()) return;
    node.key() = to;
    node.mapped().name = to;
    if (!out.insert(std::move(node)).inserted) throw InputError(source + ": tensor " + to + " appears twice");
  };
  // A tensor llama.cpp stores as `stored` while the table has `want` (the same values):
  // given the table's shape, so any other shape is reported as the file's.
  auto reshape = [&](Part part, int64_t layer, const std::vector<int64_t>& stored, const std::vector<int64_t>& want) {
    const auto it = out.find(tensor_name(part, layer));
    if (it != out.end() && it->second.shape == stored) it->second.shape = want;
  };
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    if (!spec.layer_has_mixer(l)) {
      rename(tensor_name(Part::ATTN_NORM, l), tensor_name(Part::FFN_NORM, l));  // llama.cpp's attn_norm on every block
      continue;
    }
    if (!spec.layer_is_recurrent(l)) continue;
    for (const auto& [shared, mamba] : kSharedSsmNames) rename(tensor_name(shared, l), tensor_name(mamba, l));
    const ModelSpec::Mamba2& m = spec.mamba2;
    reshape(Part::SSM_A_LOG, l, {m.num_heads, 1}, {m.num_heads});
    reshape(Part::SSM_D, l, {m.num_heads, 1}, {m.num_heads});
    reshape(Part::SSM_NORM, l, {m.n_groups, m.inner() / m.n_groups}, {m.inner()});
    const auto a = out.find(tensor_name(Part::SSM_A_LOG, l));
    if (keep && a != out.end() && l >= range.first_layer && l < range.last_layer)
      a->second = a_log_from_ssm_a(a->second, *keep, source);
  }
  return out;
}

}  // namespace spark
