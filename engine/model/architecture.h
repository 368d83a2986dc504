// architecture.h — what one architecture adds to the shared model description. Each
// architecture is one file under engine/model/arch/ defining one Architecture, and one row
// of the registry (architectures.cpp); nothing else asks which architecture a model is:
// the rest reads the ModelSpec these hooks fill and the flags below.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/model/model_spec.h"
#include "engine/model/tensor.h"
#include "engine/model/weights.h"

namespace spark {

struct ConfigReader;    // engine/model/spec_readers.h
struct GgufMetaReader;  // engine/model/spec_readers.h

struct Architecture {
  // The Hugging Face class name (config.json's architectures[0]).
  const char* hf_class;
  // llama.cpp's general.architecture, or nullptr when GGUF files of it are not read.
  const char* gguf_name;
  // Multimodal checkpoints keep the text model's settings in this config.json object
  // ("text_config"); nullptr when they are at the top level.
  const char* text_config = nullptr;
  // The text model's settings a config.json may leave out, as a JSON object of transformers'
  // defaults for the class (published multimodal configs list only what differs from
  // them); nullptr when every key the readers need must be given.
  const char* config_defaults = nullptr;
  // Keys such a class keeps beside text_config that read_config reads as well (they join the
  // text model's settings): Gemma 4's assistant's own sizes.
  std::vector<const char*> outer_keys = {};

  // The architecture's own config.json keys, read after the shared ones (sizes, RoPE,
  // dtype, quantization): biases, norms, MLP or experts, sliding windows. Throws
  // InputError naming the key.
  void (*read_config)(const ConfigReader& config, ModelSpec& spec);
  // The same from a GGUF file's metadata (and tensor list, where llama.cpp keeps no key).
  // nullptr when gguf_name is.
  void (*read_gguf)(const GgufMetaReader& meta, ModelSpec& spec);

  // Checkpoints that store parts otherwise than the shared tensor table (arch.h): the
  // file's tensors under the table's names; with `keep` set, the layers of `range` get
  // their converted bytes in buffers it holds. nullptr when the file matches the table.
  std::map<std::string, Tensor> (*convert_checkpoint)(const std::map<std::string, Tensor>& file,
                                                      const ModelSpec& spec, LayerRange range, Weights* keep,
                                                      const std::string& source) = nullptr;
  // Other names llama.cpp gives a layer part in this architecture's GGUF files
  // ({llama.cpp base name, the shared table's base name}).
  std::vector<std::pair<const char*, const char*>> gguf_aliases = {};
  // Layer tensors llama.cpp keeps fused where the table has parts ({llama.cpp base name,
  // the Hugging Face checkpoint's name within the layer}): they go under that name to
  // convert_gguf, which splits them as it splits the checkpoint's.
  std::vector<std::pair<const char*, const char*>> gguf_fused = {};
  // convert_checkpoint's counterpart for GGUF files, over their tensors under Hugging Face
  // names; nullptr when those match the table.
  std::map<std::string, Tensor> (*convert_gguf)(const std::map<std::string, Tensor>& file, const ModelSpec& spec,
                                                LayerRange range, Weights* keep, const std::string& source) = nullptr;
  // llama.cpp's converter interleaves the Q and K rows of each head for its RoPE: the
  // loader puts them back (gguf_unpermute_rows).
  bool gguf_qk_rows_permuted = false;
  // RoPE may rotate fewer dimensions than a head has (rope.dimension_count, Qwen3.5).
  bool gguf_partial_rotary = false;
  // attention.head_count_kv may be a per-layer array (0 on layers that do not attend,
  // Nemotron-H): the shared reader leaves it to read_gguf, which must set num_kv_heads.
  bool gguf_kv_heads_per_layer = false;
  // YaRN as the GGUF stores it rounds the blended band to whole dimensions unless the
  // architecture's own config says otherwise (gpt-oss: truncate false).
  bool gguf_yarn_truncates = true;
  // Activations overflow FP16 (trained in BF16): the GPU computes in BF16 whatever the
  // file holds.
  bool needs_bf16_activations = false;
};

// Every architecture sparkd runs, in the order messages list them.
const std::vector<const Architecture*>& architectures();
// nullptr when none matches.
const Architecture* find_hf_architecture(const std::string& hf_class);
const Architecture* find_gguf_architecture(const std::string& gguf_name);
// "LlamaForCausalLM, MistralForCausalLM, ..." / "llama, qwen2, ...", for error messages.
std::string hf_architecture_list();
std::string gguf_architecture_list();

// Adds `arch` to the registry while it lives: how a unit test plugs in a fake
// architecture. Real ones are rows of architectures.cpp.
class ScopedArchitecture {
 public:
  explicit ScopedArchitecture(const Architecture& arch);
  ~ScopedArchitecture();
  ScopedArchitecture(const ScopedArchitecture&) = delete;
  ScopedArchitecture& operator=(const ScopedArchitecture&) = delete;

 private:
  const Architecture* arch_;
};

}  // namespace spark
