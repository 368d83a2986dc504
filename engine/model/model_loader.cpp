// model_loader.cpp — format detection and stage loading for Hugging Face folders, GGUF
// files and dummy weights.
#include "engine/model/model_loader.h"

#include <filesystem>

#include "engine/model/arch.h"
#include "engine/model/architecture.h"
#include "engine/model/dummy.h"
#include "engine/model/load_weights.h"
#include "engine/model/nvfp4_weights.h"
#include "engine/util/check.h"

namespace spark {

namespace fs = std::filesystem;

std::string_view model_format_name(ModelFormat f) {
  switch (f) {
    case ModelFormat::SAFETENSORS: return "safetensors";
    case ModelFormat::GGUF: return "gguf";
    case ModelFormat::DUMMY: return "dummy";
  }
  return "?";
}

namespace {

bool is_gguf_path(const std::string& p) {
  return p.size() >= 5 && p.compare(p.size() - 5, 5, ".gguf") == 0;
}

// An embedder or reranker runs without its LM head (ModelSpec::pooled).
ModelSpec for_role(ModelSpec s, const std::string& role) {
  if (role == "chat" && s.encoder)
    throw InputError(s.architecture + " is an encoder, which has no LM head to generate with: serve it with "
                     "[model] role = \"embed\" or \"rerank\"");
  if (role == "chat") return s;
  s.pooled = true;
  s.tie_word_embeddings = true;
  return s;
}

DType weight_dtype_for(const Config& c, const ModelSpec& s) {
  if (c.model.dtype == "bf16") return DType::BF16;
  if (c.model.dtype == "fp16") return DType::F16;
  return s.dtype;
}

}  // namespace

ModelInfo inspect_model(const Config& c) {
  const std::string& path = c.model.path;
  if (path.empty()) throw InputError("model.path is not set: name a Hugging Face model folder or a .gguf file");
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError("model path '" + path + "' does not exist");
  ModelInfo info;
  info.path = path;
  info.tokenizer_path = c.model.tokenizer.empty() ? path : c.model.tokenizer;
  info.chat_template_path = c.model.chat_template;
  info.role = c.model.role;
  bool dummy = c.model.load_format == "dummy";
  if (c.model.load_format != "auto" && !dummy)
    throw InputError("model.load_format = \"" + c.model.load_format + "\" is not one of auto, dummy");

  if (fs::is_regular_file(st)) {
    if (!is_gguf_path(path) && fs::path(path).filename() == "config.json" && dummy) {
      // load_format = dummy may name the config.json itself.
      info.spec = for_role(load_hf_spec(fs::path(path).parent_path().string()), c.model.role);
    } else if (is_gguf_path(path)) {
      auto g = std::make_shared<GgufFile>(GgufFile::open(path));
      info.spec = for_role(spec_from_gguf(*g), c.model.role);
      if (!dummy) {
        info.tensors = gguf_hf_tensors(*g, info.spec);
        check_tensor_set(info.tensors, info.spec, full_range(info.spec), "GGUF file '" + path + "'");
      }
      info.gguf = std::move(g);
    } else {
      throw InputError("model path '" + path + "' is a file but not a .gguf; give a .gguf file or a Hugging Face folder");
    }
  } else if (fs::is_directory(st)) {
    info.spec = for_role(load_hf_spec(path), c.model.role);
    if (!dummy) {
      auto st_model = std::make_shared<SafetensorsModel>(open_safetensors_model(path));
      add_base_model_prefix(st_model->tensors);
      info.tensors = info.spec.arch->convert_checkpoint
                         ? info.spec.arch->convert_checkpoint(st_model->tensors, info.spec, full_range(info.spec),
                                                              nullptr, "model folder '" + path + "'")
                         : st_model->tensors;
      // The map names the checkpoint's own modules (before an architecture renames them).
      if (info.spec.modelopt) check_modelopt_layers(st_model->tensors, info.spec, "model folder '" + path + "'");
      if (info.spec.nvfp4) info.tensors = nvfp4_header_view(info.tensors, "model folder '" + path + "'");
      check_tensor_set(info.tensors, info.spec, full_range(info.spec), "model folder '" + path + "'");
      info.safetensors = std::move(st_model);
    }
  } else {
    throw InputError("model path '" + path + "' is neither a file nor a folder");
  }
  info.format = dummy ? ModelFormat::DUMMY : info.gguf ? ModelFormat::GGUF : ModelFormat::SAFETENSORS;
  info.weight_dtype = weight_dtype_for(c, info.spec);
  info.quantize = weight_quantization(c.model);
  return info;
}

ModelInfo mtp_head_info(const ModelInfo& model) {
  if (model.spec.mtp_layers <= 0)
    throw InputError("model '" + model.path + "' (" + model.spec.architecture + ") has no MTP head: its " +
                     (model.format == ModelFormat::GGUF ? "file sets no nextn_predict_layers"
                                                        : "config names no MTP layers (mtp_num_hidden_layers, "
                                                          "num_nextn_predict_layers)"));
  ModelInfo head = model;
  head.spec = mtp_head_spec(model.spec);
  if (model.format == ModelFormat::DUMMY) return head;
  if (model.format == ModelFormat::GGUF) {
    head.tensors = gguf_hf_tensors(*model.gguf, head.spec);
    check_tensor_set(head.tensors, head.spec, full_range(head.spec), "GGUF file '" + model.path + "' (MTP head)");
    return head;
  }
  const std::string source = "model folder '" + model.path + "' (MTP head)";
  head.tensors = head.spec.arch->convert_checkpoint(model.safetensors->tensors, head.spec, full_range(head.spec),
                                                    nullptr, source);
  check_tensor_set(head.tensors, head.spec, full_range(head.spec), source);
  return head;
}

uint64_t stage_weight_bytes(const ModelInfo& info, LayerRange range) {
  const ModelSpec& s = info.spec;
  if (info.format == ModelFormat::DUMMY && !info.quantize.active()) return dummy_weight_bytes(s, range, info.weight_dtype);
  uint64_t total = 0;
  for (const TensorSpec& t : expected_tensors(s, range)) {
    // present: inspect_model checked the set
    const DType stored = info.format == ModelFormat::DUMMY ? dummy_tensor_dtype(s, t, info.weight_dtype)
                                                           : info.tensors.at(t.name).dtype;
    const int64_t cols = t.shape.back(), rows = t.shape.size() == 2 ? t.shape[0] : 1;
    const DType served = t.shape.size() == 2 ? served_dtype(info.quantize, s, t.part, stored, cols) : stored;
    if (served == stored && info.format != ModelFormat::DUMMY) {
      total += info.tensors.at(t.name).nbytes;
    } else {
      int64_t n = 1;
      for (int64_t d : t.shape) n *= d;
      total += dtype_nbytes(served, n, cols);
      if (served != stored && served == DType::F8_E4M3)  // the f32 scales
        total += 4 * uint64_t((rows + fp8_load_block_rows(s) - 1) / fp8_load_block_rows(s) *
                              ((cols + fp8_load_block_cols(s, cols) - 1) / fp8_load_block_cols(s, cols)));
    }
  }
  return total;
}

Weights load_stage_weights(const ModelInfo& info, LayerRange range) {
  check_range(info.spec, range);
  switch (info.format) {
    case ModelFormat::DUMMY: return make_dummy_weights(info.spec, range, info.weight_dtype, 0, info.quantize);
    case ModelFormat::GGUF: return load_gguf_weights(*info.gguf, info.spec, range);
    case ModelFormat::SAFETENSORS:
      return load_safetensors_weights(*info.safetensors, info.spec, range, "model folder '" + info.path + "'");
  }
  SPARK_CHECK(false, "unknown model format");
}

LoadedModel load_model(const Config& config, LayerRange range) {
  LoadedModel m{inspect_model(config), Weights{}};
  if (range.last_layer == 0) range = full_range(m.info.spec);
  m.weights = load_stage_weights(m.info, range);
  return m;
}

LoadedModel load_mtp_head(const ModelInfo& model) {
  LoadedModel head{mtp_head_info(model), Weights{}};
  head.weights = load_stage_weights(head.info, full_range(head.info.spec));
  return head;
}

}  // namespace spark
