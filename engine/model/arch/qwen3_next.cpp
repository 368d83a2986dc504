// qwen3_next.cpp — Qwen3-Next (Qwen3NextForCausalLM, Qwen3-Next-80B-A3B): the text-only
// forerunner of Qwen3.5's hybrid, computing the same layers (Gated DeltaNet and gated
// full attention, routed experts beside a sigmoid-gated shared expert, zero-centred
// RMSNorm). What differs is the checkpoint: settings at config.json's top level, experts
// stored one by one (the shared table's names), dense layers where mlp_only_layers says,
// and each DeltaNet layer's input projections fused per key-head group, which the
// conversion below unfuses. The MTP head (mtp.*, one layer shaped as the full-attention
// layers with experts, as Qwen3.5's) is read for the head's spec only; the config names no
// count of it, so it is num_nextn_predict_layers where given, else 1, as vLLM reads it.
// GGUF files (llama.cpp's qwen3next)
// are read too: llama.cpp splits in_proj_qkvz into the table's parts itself and keeps
// in_proj_ba fused (ssm_ba), which the same conversion splits; the value heads stay
// grouped by key head, and a layer without a router is one of mlp_only_layers.
#include <algorithm>
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
  s.mtp_layers = r.integer_or("num_nextn_predict_layers", 0, 16, 1);
}

// The MTP head's tensors under the table's names (ModelSpec::mtp_head): mtp.layers.0.* is its
// layer and mtp.norm its final norm, mtp.fc and the pre-fc norms keep their names, and the
// embedding and the LM head are the model's. Throws when the checkpoint holds no head.
std::map<std::string, Tensor> head_tensors(const std::map<std::string, Tensor>& file, const std::string& source) {
  std::map<std::string, Tensor> out;
  bool head = false;
  for (const auto& [name, tensor] : file) {
    head = head || name.starts_with(kMtpPrefix);
    std::string table;
    if (name == tensor_name(Part::EMBEDDING) || name == tensor_name(Part::LM_HEAD)) table = name;
    else if (name.starts_with("mtp.layers.0.") || name.starts_with("mtp.norm.")) table = "model." + name.substr(kMtpPrefix.size());
    else if (name.starts_with(kMtpPrefix) && !name.starts_with("mtp.layers.")) table = name;
    if (table.empty()) continue;
    Tensor t = tensor;
    t.name = table;
    out.emplace(table, t);
  }
  if (!head)
    throw InputError(source + " holds no MTP head tensors (mtp.*): this Qwen3-Next checkpoint has no head to draft with");
  return out;
}

void read_gguf(const GgufMetaReader& m, ModelSpec& s) {
  read_gated_delta_net_hybrid(m, s);
  s.delta_net.value_heads_tiled = false;  // llama.cpp reorders them for qwen35 only
  s.num_experts = m.integer("expert_count", 1, MAX_EXPERTS);
  s.num_experts_per_tok = m.integer("expert_used_count", 1, s.num_experts);
  s.moe_intermediate_size = m.integer("expert_feed_forward_length", 1, MAX_DIM);
  s.shared_expert_intermediate_size = m.integer("expert_shared_feed_forward_length", 0, MAX_DIM, 0);
  s.norm_topk_prob = true;
  s.decoder_sparse_step = 1;
  for (int64_t l = 0; l < s.num_layers; ++l)
    if (!m.f.find_tensor(gguf_tensor_name(Part::ROUTER, l))) s.mlp_only_layers.push_back(l);
  s.intermediate_size = m.integer("feed_forward_length", 1, MAX_DIM, s.mlp_only_layers.empty() ? std::optional<int64_t>(0)
                                                                                                  : std::nullopt);
}

// One DeltaNet layer's fused projections, unfused into the table's parts. Per key-head
// group g of the nk groups (r = num_v_heads / nk value heads each):
//   in_proj_qkvz rows: q_g (dk), k_g (dk), v_g (r * dv), z_g (r * dv)
//   in_proj_ba rows:   b_g (r), a_g (r)
// and the parts hold every group's rows of a kind in group order:
//   LIN_QKV = q_0..q_{nk-1}, k_0.., v_0..   LIN_Z = z_0..   LIN_B = b_0..   LIN_A = a_0..
// A copy (the rows interleave), made only for the layers being loaded; the others get
// their shapes without bytes. FP8 weights (Qwen3-Next-80B-A3B-Instruct-FP8) bring their
// scales along: a per-tensor scale as it is, per-row scales row by row, and block scales
// block by block, which needs each block of a part to take all its rows from one block of
// the fused matrix (so in the published checkpoints: every run is whole 128-row blocks,
// and in_proj_ba fits in one block); otherwise the file is refused.
class FusedProjections {
 public:
  FusedProjections(const std::map<std::string, Tensor>& file, const ModelSpec& spec, int64_t layer,
                   const std::string& source)
      : file_(file), spec_(spec), d_(spec.delta_net), h_(spec.hidden_size), layer_(layer), source_(source) {}

  // Either may be null: a GGUF file keeps only in_proj_ba fused.
  void convert(const Tensor* qkvz, const Tensor* ba, Weights* keep, std::map<std::string, Tensor>& out) {
    const int64_t nk = d_.num_k_heads, r = d_.num_v_heads / d_.num_k_heads, dk = d_.k_head_dim, dv = d_.v_head_dim;
    const int64_t group_qkvz = 2 * dk + 2 * r * dv, group_ba = 2 * r;
    if (qkvz) check(*qkvz, nk * group_qkvz);
    if (ba) check(*ba, nk * group_ba);
    // Each part: its source, and the runs (rows per group, offset within the group) it takes.
    struct Piece {
      Part part;
      const Tensor* src;
      int64_t group;
      std::vector<std::pair<int64_t, int64_t>> runs;
    };
    const Piece pieces[] = {
        {Part::LIN_QKV, qkvz, group_qkvz, {{dk, 0}, {dk, dk}, {r * dv, 2 * dk}}},
        {Part::LIN_Z, qkvz, group_qkvz, {{r * dv, 2 * dk + r * dv}}},
        {Part::LIN_B, ba, group_ba, {{r, 0}}},
        {Part::LIN_A, ba, group_ba, {{r, r}}},
    };
    std::vector<std::pair<Tensor, const Tensor*>> made;  // (tensor without bytes yet, its source)
    std::vector<std::vector<int64_t>> rows_of;           // the source row of each row made
    for (const Piece& p : pieces) {
      if (!p.src) continue;
      std::vector<int64_t> rows;
      for (const auto& [n, offset] : p.runs)
        for (int64_t g = 0; g < nk; ++g)
          for (int64_t i = 0; i < n; ++i) rows.push_back(g * p.group + offset + i);
      Tensor t;
      t.name = tensor_name(p.part, layer_);
      t.dtype = p.src->dtype;
      t.shape = {int64_t(rows.size()), h_};
      t.nbytes = rows.size() * row_bytes(*p.src);
      made.emplace_back(t, p.src);
      rows_of.push_back(rows);
      if (p.src->dtype == DType::F8_E4M3) {
        const Tensor& scale = scale_of(*p.src);
        made.emplace_back(unfused_scale(t, scale, rows), &scale);
        rows_of.push_back(scale_rows(t, *p.src, scale, rows));
      }
    }
    size_t total = 0;
    for (const auto& [t, src] : made) total += t.nbytes;
    std::shared_ptr<std::vector<uint8_t>> buf;
    if (keep) buf = std::make_shared<std::vector<uint8_t>>(total);
    size_t at = 0;
    for (size_t i = 0; i < made.size(); ++i) {
      Tensor t = made[i].first;
      if (buf) {
        const Tensor& src = *made[i].second;
        const size_t row = t.nbytes / rows_of[i].size();
        uint8_t* dst = buf->data() + at;
        for (size_t k = 0; k < rows_of[i].size(); ++k)
          std::memcpy(dst + k * row, static_cast<const uint8_t*>(src.data) + size_t(rows_of[i][k]) * row, row);
        t.data = dst;
      }
      at += t.nbytes;
      if (keep) keep->own(t.name, buf);  // shared by the layer's unfused tensors, freed with the last
      out[t.name] = t;
    }
  }

 private:
  // A row in the tensor's own blocks (a GGUF file's may be block-quantized).
  size_t row_bytes(const Tensor& t) const {
    return size_t(h_ / dtype_block_elems(t.dtype)) * size_t(dtype_block_bytes(t.dtype));
  }

  void check(const Tensor& t, int64_t rows) const {
    const bool floats = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16 || t.dtype == DType::F8_E4M3;
    if (!floats && !(dtype_is_quantized(t.dtype) && h_ % dtype_block_elems(t.dtype) == 0))
      throw InputError(source_ + ": tensor " + t.name + " has dtype " + std::string(dtype_name(t.dtype)) +
                       "; the fused DeltaNet projections must be F32, F16, BF16, F8_E4M3 or whole quantized blocks a row");
    if (t.shape != std::vector<int64_t>{rows, h_})
      throw InputError(source_ + ": tensor " + t.name + " has shape " + shape_str(t.shape) + ", the config (" +
                       std::to_string(d_.num_k_heads) + " key heads of " + std::to_string(d_.k_head_dim) + ", " +
                       std::to_string(d_.num_v_heads) + " value heads of " + std::to_string(d_.v_head_dim) +
                       ", hidden_size " + std::to_string(h_) + ") implies " + shape_str({rows, h_}));
  }

  bool blocks() const { return spec_.fp8_block_rows > 0; }

  const Tensor& scale_of(const Tensor& t) const {
    const std::string name = t.name + (blocks() ? "_scale_inv" : "_scale");
    const auto it = file_.find(name);
    if (it == file_.end()) throw InputError(source_ + ": FP8 weight '" + t.name + "' has no scale tensor '" + name + "'");
    const Tensor& s = it->second;
    if (s.dtype != DType::F32 && s.dtype != DType::BF16 && s.dtype != DType::F16)
      throw InputError(source_ + ": scale tensor '" + name + "' has dtype " + std::string(dtype_name(s.dtype)) +
                       "; FP8 scales must be F32, BF16 or F16");
    return s;
  }

  // The unfused part's scale tensor: the fused one's shape with the part's row count.
  Tensor unfused_scale(const Tensor& part, const Tensor& scale, const std::vector<int64_t>& rows) const {
    Tensor s;
    s.name = part.name + (blocks() ? "_scale_inv" : "_scale");
    s.dtype = scale.dtype;
    s.shape = scale.shape;
    if (blocks())
      s.shape[0] = (int64_t(rows.size()) + spec_.fp8_block_rows - 1) / spec_.fp8_block_rows;
    else if (scale.numel() > 1)
      s.shape[0] = int64_t(rows.size());
    s.nbytes = size_t(s.numel()) * size_t(dtype_block_bytes(s.dtype));
    return s;
  }

  // Which row of the fused scale tensor each row of the unfused one copies.
  std::vector<int64_t> scale_rows(const Tensor& part, const Tensor& fused, const Tensor& scale,
                                  const std::vector<int64_t>& rows) const {
    const int64_t fused_rows = fused.shape[0];
    if (!blocks()) {
      if (scale.numel() == 1) return {0};
      if (scale.shape[0] != fused_rows)
        throw InputError(source_ + ": scale tensor '" + fused.name + "_scale' is " + shape_str(scale.shape) +
                         "; for " + shape_str(fused.shape) + " it must be [1] or [" + std::to_string(fused_rows) + ", 1]");
      return rows;
    }
    const int64_t br = spec_.fp8_block_rows, bc = spec_.fp8_block_cols;
    const std::vector<int64_t> grid = {(fused_rows + br - 1) / br, (h_ + bc - 1) / bc};
    if (scale.shape != grid)
      throw InputError(source_ + ": scale tensor '" + fused.name + "_scale_inv' is " + shape_str(scale.shape) + ", but " +
                       shape_str(fused.shape) + " in " + std::to_string(br) + "x" + std::to_string(bc) +
                       " blocks needs " + shape_str(grid));
    std::vector<int64_t> out;
    for (size_t first = 0; first < rows.size(); first += size_t(br)) {
      const int64_t block = rows[first] / br;
      for (size_t k = first; k < std::min(rows.size(), first + size_t(br)); ++k)
        if (rows[k] / br != block)
          throw InputError(source_ + ": " + part.name + " would take rows of two " + std::to_string(br) +
                           "-row scale blocks of " + fused.name + " into one of its blocks; its key-head groups " +
                           "do not align with weight_block_size");
      out.push_back(block);
    }
    return out;
  }

  const std::map<std::string, Tensor>& file_;
  const ModelSpec& spec_;
  const ModelSpec::DeltaNet& d_;
  int64_t h_, layer_;
  const std::string& source_;
};

std::map<std::string, Tensor> convert(const std::map<std::string, Tensor>& file, const ModelSpec& spec,
                                      LayerRange range, Weights* keep, const std::string& source) {
  if (spec.mtp_head) return head_tensors(file, source);
  std::map<std::string, Tensor> out;
  size_t skipped = 0;
  for (const auto& [name, t] : file) {
    if (name.starts_with(kMtpPrefix)) {
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
    // Fused, or already split into the table's parts (a GGUF file's attn_qkv and attn_gate).
    auto fused = [&](const char* name, Part split) -> const Tensor* {
      const auto it = file.find(base + name);
      if (it != file.end()) return &it->second;
      if (file.count(tensor_name(split, l))) return nullptr;
      throw InputError(source + ": tensor " + base + name + " is missing (layer " + std::to_string(l) +
                       " is a linear_attention layer)");
    };
    const Tensor* qkvz = fused("in_proj_qkvz.weight", Part::LIN_QKV);
    const Tensor* ba = fused("in_proj_ba.weight", Part::LIN_B);
    const bool load = keep && l >= range.first_layer && l < range.last_layer;
    FusedProjections(file, spec, l, source).convert(qkvz, ba, load ? keep : nullptr, out);
  }
  if (skipped > 0 && !keep)  // said once, when the model is inspected
    log_info("model: ", skipped, " tensors of the MTP head are not loaded");
  return out;
}

// llama.cpp's names: the MLP's norm is post_attention_norm (the table's ffn_norm), and
// in_proj_ba stays fused as ssm_ba.
const std::vector<std::pair<const char*, const char*>> kGgufAliases = {{"post_attention_norm", "ffn_norm"}};
const std::vector<std::pair<const char*, const char*>> kGgufFused = {{"ssm_ba", "linear_attn.in_proj_ba"}};

}  // namespace

extern const Architecture kQwen3Next{
    .hf_class = "Qwen3NextForCausalLM",
    .gguf_name = "qwen3next",
    .read_config = read_config,
    .read_gguf = read_gguf,
    .convert_checkpoint = convert,
    .gguf_aliases = kGgufAliases,
    .gguf_fused = kGgufFused,
    .convert_gguf = convert,
    .gguf_partial_rotary = true,
    .needs_bf16_activations = true,
};

}  // namespace spark
