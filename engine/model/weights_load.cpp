// weights_load.cpp — Weights from safetensors folders and GGUF files.
#include <cmath>
#include <cstring>
#include <memory>

#include "engine/model/architecture.h"
#include "engine/model/fp8_weights.h"
#include "engine/model/load_weights.h"
#include "engine/model/nvfp4_weights.h"
#include "engine/model/quant.h"
#include "engine/util/check.h"
#include "engine/util/mmap.h"

namespace spark {

Weights load_safetensors_weights(const SafetensorsModel& model, const ModelSpec& spec, LayerRange range,
                                 const std::string& source) {
  Weights w;
  w.set_range(range);
  for (const auto& f : model.files) w.keep_alive(f);
  // A checkpoint that stores parts otherwise than the shared table (gpt-oss's stacked
  // experts) is converted by its architecture, into buffers w keeps.
  const bool convert = spec.arch && spec.arch->convert_checkpoint;
  const std::map<std::string, Tensor> converted =
      convert ? spec.arch->convert_checkpoint(model.tensors, spec, range, &w, source) : std::map<std::string, Tensor>{};
  const std::map<std::string, Tensor>& file_tensors = convert ? converted : model.tensors;
  if (spec.modelopt) {
    check_modelopt_layers(model.tensors, spec, source);  // the checkpoint's own module names
    check_modelopt_scales(file_tensors, source);
  }
  const std::map<std::string, Tensor> nvfp4_view = spec.nvfp4 ? nvfp4_header_view(file_tensors, source)
                                                                : std::map<std::string, Tensor>{};
  const std::map<std::string, Tensor>& tensors = spec.nvfp4 ? nvfp4_view : file_tensors;
  std::vector<TensorSpec> need = check_tensor_set(tensors, spec, range, source);
  for (const TensorSpec& ts : need) {
    Tensor t = tensors.at(ts.name);
    if (t.dtype == DType::F8_E4M3)
      attach_fp8_scales(tensors, spec, t, w, source);
    else if (t.dtype == DType::NVFP4)
      t = nvfp4_from_modelopt(tensors, t, w, source);
    else if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16 && t.dtype != DType::MXFP4 &&
             !(ts.part == Part::TOKEN_ORDERING && t.dtype == DType::I64))  // token ids, read as such
      throw InputError(source + ": tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                       "; weights must be F32, F16 or BF16 (or F8_E4M3 in an FP8 checkpoint, U8 codes with E4M3 "
                       "scales in an NVFP4 one, MXFP4 experts)");
    w.add(t);
  }
  return w;
}

std::map<std::string, Tensor> gguf_hf_tensors(const GgufFile& f, const ModelSpec& spec, LayerRange range, Weights* keep) {
  std::map<std::string, Tensor> out;
  // llama.cpp counts a multi-token-prediction block among the layers (after them); the
  // model's layers end before it, and an MTP head's spec reads only it (gguf_mtp_head_name).
  const std::string arch = spec.arch->gguf_name;
  const int64_t file_blocks = f.get_int(arch + ".block_count").value_or(spec.num_layers);
  const int64_t head_block = spec.mtp_head ? file_blocks - f.get_int(arch + ".nextn_predict_layers").value_or(0) : -1;
  // llama.cpp's NVFP4 tensors come with F32 sidecars: X.scale (ModelOpt's weight_scale_2,
  // one per tensor or per expert) and X.input_scale (unused: activations stay 16-bit). Beside
  // a matrix of another type, X.scale is a scale of the model's own (Gemma 4's router input
  // scale, ffn_gate_inp.scale, and per-expert scale, ffn_down_exps.scale), read under the
  // table's name for it, X_scale.
  std::map<std::string, const GgufTensorInfo*> sidecars;
  std::map<std::string, std::string> own_scales;  // file name -> the name it is read under
  for (const GgufTensorInfo& info : f.tensors) {
    if (!gguf_is_nvfp4_sidecar(info.name)) continue;
    const std::string base = info.name.substr(0, info.name.rfind('.'));
    const GgufTensorInfo* of = f.find_tensor(base + ".weight");
    if (info.name.ends_with(".scale") && of && of->dtype != DType::NVFP4)
      own_scales[info.name] = base + "_scale.weight";
    else
      sidecars[info.name] = &info;
  }
  const auto scale_of = [&](const GgufTensorInfo& info, int64_t count) -> const float* {
    if (info.dtype != DType::NVFP4 || info.name.size() < 7) return nullptr;
    const auto it = sidecars.find(info.name.substr(0, info.name.size() - 7) + ".scale");
    if (it == sidecars.end()) return nullptr;  // llama.cpp multiplies by nothing then
    Tensor s;
    s.name = it->first;
    s.dtype = it->second->dtype;
    s.shape = it->second->shape;
    s.data = f.tensor_data(*it->second);
    return checked_tensor_scales(s, count, "GGUF file '" + f.source + "'");
  };
  for (const GgufTensorInfo& info : f.tensors) {
    if (info.name == "rope_freqs.weight") continue;  // folded into the spec's RopeScaling
    if (sidecars.count(info.name)) continue;
    const auto own_scale = own_scales.find(info.name);
    const std::string& file_name = own_scale == own_scales.end() ? info.name : own_scale->second;
    const std::string name = spec.mtp_head ? gguf_mtp_head_name(file_name, head_block) : file_name;
    if (name.empty()) continue;
    const int64_t layer = gguf_layer_of(name);
    if (layer >= spec.num_layers && layer < file_blocks) continue;
    auto hf = gguf_to_hf_name(name, spec.arch->gguf_aliases, spec.arch->gguf_fused);
    if (!hf) throw InputError("GGUF file '" + f.source + "': tensor '" + info.name + "' is not part of any supported architecture");
    Tensor t;
    t.dtype = info.dtype;
    t.data = f.tensor_data(info);
    // Experts llama.cpp stacks where the table has a part per expert; a fused stack
    // (Architecture::gguf_fused) goes whole to convert_gguf.
    const bool stacked = gguf_is_stacked_experts(name) && hf->find("{E}") != std::string::npos;
    const float* scale = scale_of(info, stacked && !info.shape.empty() ? info.shape[0] : 1);
    if (!stacked) {
      t.name = *hf;
      t.shape = info.shape;
      t.nbytes = info.nbytes;
      if (scale) {
        t.scale = scale;
        t.scale_block_rows = t.rows();
        t.scale_block_cols = t.cols();
      }
      // Squeezed by llama.cpp: the conv1d kernel ([channels, 1, kernel]) and the shared
      // expert's gate ([1, hidden]).
      if (t.shape.size() == 2 && t.name == tensor_name(Part::LIN_CONV, layer)) t.shape.insert(t.shape.begin() + 1, 1);
      if (t.shape.size() == 1 && t.name == tensor_name(Part::SHARED_EXPERT_GATE, layer)) t.shape.insert(t.shape.begin(), 1);
      if (!out.emplace(t.name, t).second) throw InputError("GGUF file '" + f.source + "': tensor '" + t.name + "' appears twice");
      continue;
    }
    // [n_expert, rows, cols] stacked (biases [n_expert, rows]): expert e is the e-th
    // contiguous slab.
    const bool bias = info.name.size() > 5 && info.name.compare(info.name.size() - 5, 5, ".bias") == 0;
    if (info.shape.size() != (bias ? 2u : 3u) || info.shape[0] < 1)
      throw InputError("GGUF file '" + f.source + "': expert tensor '" + info.name + "' must be " +
                       (bias ? "2-D" : "3-D"));
    int64_t n_expert = info.shape[0];
    size_t slab = info.nbytes / static_cast<size_t>(n_expert);
    for (int64_t e = 0; e < n_expert; ++e) {
      Tensor x = t;
      x.name = gguf_expert_name(*hf, e);
      x.shape.assign(info.shape.begin() + 1, info.shape.end());
      x.nbytes = slab;
      x.data = static_cast<const uint8_t*>(t.data) + slab * static_cast<size_t>(e);
      if (scale) {
        x.scale = scale + e;
        x.scale_block_rows = x.rows();
        x.scale_block_cols = x.cols();
      }
      if (!out.emplace(x.name, x).second) throw InputError("GGUF file '" + f.source + "': tensor '" + x.name + "' appears twice");
    }
  }
  if (spec.arch->convert_gguf) return spec.arch->convert_gguf(out, spec, range, keep, "GGUF file '" + f.source + "'");
  return out;
}

void gguf_unpermute_rows(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes, int64_t head_dim) {
  SPARK_CHECK(head_dim > 0 && head_dim % 2 == 0 && rows % head_dim == 0, "bad Q/K shape for unpermuting");
  int64_t half = head_dim / 2;
  for (int64_t h = 0; h < rows / head_dim; ++h) {
    const uint8_t* s = src + static_cast<size_t>(h * head_dim) * row_bytes;
    uint8_t* d = dst + static_cast<size_t>(h * head_dim) * row_bytes;
    for (int64_t i = 0; i < half; ++i) {
      std::memcpy(d + static_cast<size_t>(i) * row_bytes, s + static_cast<size_t>(2 * i) * row_bytes, row_bytes);
      std::memcpy(d + static_cast<size_t>(i + half) * row_bytes, s + static_cast<size_t>(2 * i + 1) * row_bytes, row_bytes);
    }
  }
}

namespace {

// Before any backend sees the tensor (and before any device memory is allocated).
void check_block_scales(const Tensor& t, const std::string& source) {
  const std::optional<BadBlockScale> bad = find_nonfinite_block_scale(t.dtype, t.data, t.nbytes);
  if (!bad) return;
  const int64_t blocks_per_row = t.cols() / dtype_block_elems(t.dtype);
  const char* value = std::isnan(bad->value) ? "nan" : bad->value > 0 ? "inf" : "-inf";
  throw InputError("GGUF file '" + source + "': tensor '" + t.name + "' (" + std::string(dtype_name(t.dtype)) +
                   ") has a block scale " + bad->field + " = " + value + " in block " + std::to_string(bad->block) +
                   " (row " + std::to_string(bad->block / blocks_per_row) + "); the file is damaged");
}

}  // namespace

Weights load_gguf_weights(const GgufFile& f, const ModelSpec& spec, LayerRange range) {
  Weights w;
  w.set_range(range);
  std::map<std::string, Tensor> all = gguf_hf_tensors(f, spec, range, &w);
  std::vector<TensorSpec> need = check_tensor_set(all, spec, range, "GGUF file '" + f.source + "'");
  if (f.mapping()) w.keep_alive(f.mapping());
  for (const TensorSpec& ts : need) {
    Tensor t = all.at(ts.name);
    check_block_scales(t, f.source);
    if (t.dtype == DType::NVFP4) check_nvfp4_block_scales(t, "GGUF file '" + f.source + "'");
    const bool q_or_k = ts.part == Part::Q || ts.part == Part::K || ts.part == Part::Q_BIAS || ts.part == Part::K_BIAS;
    // llama.cpp stores zero-centred norms with the one added, and -exp(A_log) for A_log.
    const bool offset_norm = spec.norm_plus_one && part_is_norm(ts.part) && ts.part != Part::LIN_NORM;
    if (offset_norm || ts.part == Part::LIN_A_LOG) {
      if (t.dtype != DType::F32)
        throw InputError("GGUF file '" + f.source + "': tensor '" + t.name + "' is " + std::string(dtype_name(t.dtype)) +
                         "; llama.cpp writes it in F32");
      auto buf = std::make_shared<std::vector<uint8_t>>(t.nbytes);
      const auto* src = static_cast<const float*>(t.data);
      auto* dst = reinterpret_cast<float*>(buf->data());
      for (size_t i = 0; i < t.nbytes / 4; ++i) {
        if (offset_norm) {
          dst[i] = src[i] - 1.0f;
        } else {
          if (!(src[i] < 0) || !std::isfinite(src[i]))
            throw InputError("GGUF file '" + f.source + "': tensor '" + t.name + "' (ssm_a, -exp(A_log)) holds " +
                             std::to_string(src[i]) + "; every value must be negative");
          dst[i] = std::log(-src[i]);
        }
      }
      t.data = buf->data();
      w.own(t.name, std::move(buf));
    }
    if (spec.arch->gguf_qk_rows_permuted && q_or_k) {
      int64_t rows = t.shape[0];
      if (t.shape.size() == 1 && dtype_is_quantized(t.dtype))
        throw InputError("GGUF file '" + f.source + "': bias '" + t.name + "' is block-quantized");
      auto buf = std::make_shared<std::vector<uint8_t>>(t.nbytes);
      gguf_unpermute_rows(static_cast<const uint8_t*>(t.data), buf->data(), rows, t.nbytes / static_cast<size_t>(rows),
                          spec.head_dim);
      release_mapped_pages(t.data, t.nbytes);  // nothing reads the file's order again
      t.data = buf->data();
      w.own(t.name, std::move(buf));
    }
    w.add(std::move(t));
  }
  return w;
}

}  // namespace spark
