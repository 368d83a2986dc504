// weights.h — the registry of named tensors of one pipeline stage.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/tensor.h"

namespace spark {

// Which part of the model a process holds: layers [first_layer, last_layer), plus the
// embedding when first_layer == 0 and the final norm and LM head when last_layer is the
// model's last layer.
struct LayerRange {
  int64_t first_layer = 0;
  int64_t last_layer = 0;
};

// Tensors use Hugging Face names ("model.layers.3.self_attn.q_proj.weight"), whatever
// the file format; GGUF names are mapped to them at load. The registry owns the storage
// (file mappings and any buffers it had to allocate); views stay valid while it lives.
class Weights {
 public:
  const Tensor& get(const std::string& name) const;  // throws InputError naming the tensor
  const Tensor* find(const std::string& name) const;  // nullptr when absent
  const std::map<std::string, Tensor>& all() const { return tensors_; }
  LayerRange range() const { return range_; }
  size_t total_bytes() const;

  // Used by the loaders.
  void add(Tensor t);
  void keep_alive(std::shared_ptr<const void> storage) { storage_.push_back(std::move(storage)); }
  // Storage that only the tensor called `name` reads (a loader's converted copy of it),
  // released when that tensor is replaced.
  void own(const std::string& name, std::shared_ptr<const void> storage) { owned_[name].push_back(std::move(storage)); }
  // The tensor of t's name becomes t, at the same address (bound tables keep pointing at
  // it), reading `storage`; what the old one owned is released (a tensor quantized at load,
  // load_quantization.h: its 16-bit copy goes).
  void replace(Tensor t, std::vector<std::shared_ptr<const void>> storage);
  void set_range(LayerRange r) { range_ = r; }

 private:
  std::map<std::string, Tensor> tensors_;
  std::vector<std::shared_ptr<const void>> storage_;
  std::map<std::string, std::vector<std::shared_ptr<const void>>> owned_;
  LayerRange range_;
};

}  // namespace spark
