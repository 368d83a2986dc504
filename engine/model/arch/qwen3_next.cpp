// qwen3_next.cpp — Qwen3-Next (Qwen3NextForCausalLM, Qwen3-Next-80B-A3B): the text-only
// forerunner of Qwen3.5's hybrid, computing the same layers (Gated DeltaNet and gated
// full attention, routed experts beside a sigmoid-gated shared expert, zero-centred
// RMSNorm). What differs is the checkpoint: settings at config.json's top level, experts
// stored one by one (the shared table's names), dense layers where mlp_only_layers says,
// and each DeltaNet layer's input projections fused per key-head group, which the
// conversion below unfuses. The MTP head is not read.
#include <cstring>
#include <memory>
#include <string_view>

#include "engine/model/arch.h"
#include "engine/model/arch/gated_delta_net_keys.h"
#include "engine/model/arch/shared_keys.h"
#include "engine/model/architecture.h"
#include "engine/model/shape_text.h"
#include "engine/util/log.h"

namespace spark {
namespace {

constexpr std::string_view kMtpPrefix = "mtp.";

void read_config(const ConfigReader& r, ModelSpec& s) {
  read_gated_delta_net_hybrid(r, s);
  read_qwen_routed_experts(r, s, true);
  s.shared_expert_intermediate_size = r.integer_or("shared_expert_intermediate_size", 0, MAX_DIM, 0);
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// One DeltaNet layer's fused projections, unfused into the table's parts. Per key-head
// group g of the nk groups (r = num_v_heads / nk value heads each):
//   in_proj_qkvz rows: q_g (dk), k_g (dk), v_g (r * dv), z_g (r * dv)
//   in_proj_ba rows:   b_g (r), a_g (r)
// and the parts hold every group's rows of a kind in group order:
//   LIN_QKV = q_0..q_{nk-1}, k_0.., v_0..   LIN_Z = z_0..   LIN_B = b_0..   LIN_A = a_0..
// A copy (the rows interleave), made only for the layers being loaded; the others get
// their shapes without bytes.
class FusedProjections {
 public:
  FusedProjections(const ModelSpec& spec, int64_t layer, const std::string& source)
      : d_(spec.delta_net), h_(spec.hidden_size), layer_(layer), source_(source) {}

  void convert(const Tensor& qkvz, const Tensor& ba, Weights* keep, std::map<std::string, Tensor>& out) {
    const int64_t nk = d_.num_k_heads, r = d_.num_v_heads / d_.num_k_heads, dk = d_.k_head_dim, dv = d_.v_head_dim;
    check(qkvz, nk * (2 * dk + 2 * r * dv));
    check(ba, nk * 2 * r);
    if (qkvz.dtype != ba.dtype)
      throw InputError(source_ + ": " + qkvz.name + " and " + ba.name + " differ in dtype");
    const size_t row = size_t(h_) * size_t(dtype_block_bytes(qkvz.dtype));
    // Each part as (source tensor, rows per group, offset of its rows within a group).
    struct Piece {
      Part part;
      std::vector<std::pair<int64_t, int64_t>> runs;  // (rows per group, offset in the group) of qkvz or ba
      bool from_ba;
    };
    const int64_t group_qkvz = 2 * dk + 2 * r * dv, group_ba = 2 * r;
    const Piece pieces[] = {
        {Part::LIN_QKV, {{dk, 0}, {dk, dk}, {r * dv, 2 * dk}}, false},
        {Part::LIN_Z, {{r * dv, 2 * dk + r * dv}}, false},
        {Part::LIN_B, {{r, 0}}, true},
        {Part::LIN_A, {{r, r}}, true},
    };
    std::shared_ptr<std::vector<uint8_t>> buf;
    if (keep) buf = std::make_shared<std::vector<uint8_t>>(size_t(qkvz.shape[0] + ba.shape[0]) * row);
    size_t at = 0;
    for (const Piece& p : pieces) {
      const Tensor& src = p.from_ba ? ba : qkvz;
      const int64_t group = p.from_ba ? group_ba : group_qkvz;
      int64_t rows = 0;
      for (const auto& [n, offset] : p.runs) rows += n * nk;
      Tensor t;
      t.name = tensor_name(p.part, layer_);
      t.dtype = src.dtype;
      t.shape = {rows, h_};
      t.nbytes = size_t(rows) * row;
      t.data = nullptr;
      if (buf) {
        uint8_t* dst = buf->data() + at;
        t.data = dst;
        const auto* from = static_cast<const uint8_t*>(src.data);
        for (const auto& [n, offset] : p.runs)
          for (int64_t g = 0; g < nk; ++g, dst += size_t(n) * row)
            std::memcpy(dst, from + size_t(g * group + offset) * row, size_t(n) * row);
      }
      at += t.nbytes;
      out[t.name] = t;
    }
    if (keep) keep->keep_alive(buf);
  }

 private:
  void check(const Tensor& t, int64_t rows) const {
    if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
      throw InputError(source_ + ": tensor " + t.name + " has dtype " + std::string(dtype_name(t.dtype)) +
                       "; the fused DeltaNet projections must be F32, F16 or BF16");
    if (t.shape != std::vector<int64_t>{rows, h_})
      throw InputError(source_ + ": tensor " + t.name + " has shape " + shape_str(t.shape) + ", the config (" +
                       std::to_string(d_.num_k_heads) + " key heads of " + std::to_string(d_.k_head_dim) + ", " +
                       std::to_string(d_.num_v_heads) + " value heads of " + std::to_string(d_.v_head_dim) +
                       ", hidden_size " + std::to_string(h_) + ") implies " + shape_str({rows, h_}));
  }

  const ModelSpec::DeltaNet& d_;
  int64_t h_, layer_;
  const std::string& source_;
};

std::map<std::string, Tensor> convert(const std::map<std::string, Tensor>& file, const ModelSpec& spec,
                                      LayerRange range, Weights* keep, const std::string& source) {
  std::map<std::string, Tensor> out;
  size_t skipped = 0;
  for (const auto& [name, t] : file) {
    if (starts_with(name, kMtpPrefix)) {
      ++skipped;
      continue;
    }
    if (name.find(".linear_attn.in_proj_qkvz.") == std::string::npos &&
        name.find(".linear_attn.in_proj_ba.") == std::string::npos)
      out.emplace(name, t);
  }
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    if (!spec.layer_is_recurrent(l)) continue;
    const std::string base = "model.layers." + std::to_string(l) + ".linear_attn.";
    const auto qkvz = file.find(base + "in_proj_qkvz.weight"), ba = file.find(base + "in_proj_ba.weight");
    if (qkvz == file.end() || ba == file.end())
      throw InputError(source + ": tensor " + (qkvz == file.end() ? base + "in_proj_qkvz.weight" : base + "in_proj_ba.weight") +
                       " is missing (layer " + std::to_string(l) + " is a linear_attention layer)");
    const bool load = keep && l >= range.first_layer && l < range.last_layer;
    FusedProjections(spec, l, source).convert(qkvz->second, ba->second, load ? keep : nullptr, out);
  }
  if (skipped > 0 && !keep)  // said once, when the model is inspected
    log_info("model: ", skipped, " tensors of the MTP head are not loaded");
  return out;
}

}  // namespace

extern const Architecture kQwen3Next{
    .hf_class = "Qwen3NextForCausalLM",
    .gguf_name = nullptr,
    .read_config = read_config,
    .read_gguf = nullptr,
    .convert_checkpoint = convert,
    .needs_bf16_activations = true,
};

}  // namespace spark
