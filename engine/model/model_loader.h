// model_loader.h — the one entry point from a Config to a spec, a tensor catalogue and
// the weights of one pipeline stage.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "engine/config.h"
#include "engine/model/gguf.h"
#include "engine/model/load_quantization.h"
#include "engine/model/model_spec.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"

namespace spark {

enum class ModelFormat : uint8_t { SAFETENSORS, GGUF, DUMMY };
std::string_view model_format_name(ModelFormat f);

// Everything known about a model before any weight byte is read: the spec, where the
// tokenizer and chat template come from, and every tensor's name (Hugging Face naming),
// dtype and shape. Files are mapped and their headers fully validated; the tensor set is
// checked against the architecture.
struct ModelInfo {
  ModelSpec spec;
  ModelFormat format = ModelFormat::SAFETENSORS;
  std::string path;            // the folder or .gguf file
  // The tokenizer's source: model.tokenizer when set, else `path` (a folder holding
  // tokenizer.json / tokenizer_config.json, or the .gguf whose metadata holds it).
  std::string tokenizer_path;
  std::string chat_template_path;  // model.chat_template override, "" = the model's own
  std::string role = "chat";       // [model] role
  DType weight_dtype = DType::BF16;  // dummy weights are made in this dtype
  WeightQuantization quantize;       // [model] quantize: what the weights become as they load
  std::map<std::string, Tensor> tensors;  // empty for dummy
  std::shared_ptr<const GgufFile> gguf;
  std::shared_ptr<const SafetensorsModel> safetensors;
};

// Resolves model.path and model.load_format ("auto": a .gguf file or a Hugging Face
// folder; "dummy": config.json alone, or a .gguf's metadata). Throws InputError for a
// missing path, bad files, or an unsupported architecture.
ModelInfo inspect_model(const Config& config);

// The MTP head of a model whose spec has one (ModelSpec::mtp_layers), read from the same
// files: its spec (mtp_head_spec) and tensors. Throws InputError when the files hold no
// such head or one of the wrong shapes, and for GGUF files (heads are read from Hugging
// Face folders).
ModelInfo mtp_head_info(const ModelInfo& model);

// Bytes of the weights a stage holding `range` keeps: as stored (or as dummy weights are
// made), as [model] quantize makes them (FP8 scales included).
uint64_t stage_weight_bytes(const ModelInfo& info, LayerRange range);

// The weights of `range`: views into the mapped files, as stored ([model] quantize is
// applied by quantize_weights for the CPU backend, by the CUDA backend as it uploads), or
// allocated dummy weights, made as [model] quantize serves them.
Weights load_stage_weights(const ModelInfo& info, LayerRange range);

struct LoadedModel {
  ModelInfo info;
  Weights weights;
};
// inspect_model + load_stage_weights. A range with last_layer == 0 means every layer.
LoadedModel load_model(const Config& config, LayerRange range = {});
// mtp_head_info + load_stage_weights: the whole MTP head of `model`.
LoadedModel load_mtp_head(const ModelInfo& model);

}  // namespace spark
