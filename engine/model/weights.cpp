// weights.cpp — the named tensor registry and the check of a checkpoint's tensor set.
#include "engine/model/weights.h"

#include <set>

#include "engine/model/fp8_weights.h"
#include "engine/model/nvfp4_weights.h"
#include "engine/model/load_weights.h"
#include "engine/model/shape_text.h"
#include "engine/util/check.h"

namespace spark {

const Tensor& Weights::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw InputError("tensor '" + name + "' is not loaded (layers [" + std::to_string(range_.first_layer) + ", " +
                     std::to_string(range_.last_layer) + "))");
  return it->second;
}

const Tensor* Weights::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

size_t Weights::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : tensors_) n += t.nbytes;
  return n;
}

void Weights::add(Tensor t) {
  std::string name = t.name;
  bool inserted = tensors_.emplace(name, std::move(t)).second;
  SPARK_CHECK(inserted, "tensor added twice: " + name);
}

void Weights::replace(Tensor t, std::vector<std::shared_ptr<const void>> storage) {
  const auto it = tensors_.find(t.name);
  SPARK_CHECK(it != tensors_.end(), "replacing a tensor that is not there: " + t.name);
  owned_[t.name] = std::move(storage);
  it->second = std::move(t);
}

namespace {

// Names checkpoints carry that the model does not use and Transformers ignores too.
bool ignorable(const std::string& name, const ModelSpec& spec) {
  if (name.size() >= 19 && name.compare(name.size() - 19, 19, "rotary_emb.inv_freq") == 0) return true;
  if (name == tensor_name(Part::LM_HEAD) && spec.tie_word_embeddings) return true;
  if (spec.pooled && name.rfind("score.", 0) == 0) return true;  // a reranker's head (engine/model/pooling.h)
  if (spec.fp8 && is_fp8_scale_name(name)) return true;  // read beside their weights (fp8_weights.h)
  if (spec.modelopt && is_modelopt_side_name(name)) return true;  // nvfp4_weights.h
  return false;
}

std::string list_names(const std::vector<std::string>& names) {
  std::string out;
  size_t shown = std::min<size_t>(names.size(), 8);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out;
}

}  // namespace

std::vector<TensorSpec> check_tensor_set(const std::map<std::string, Tensor>& found, const ModelSpec& spec,
                                         LayerRange range, const std::string& source) {
  int64_t want_count = expected_tensor_count(spec, full_range(spec));
  if (want_count > static_cast<int64_t>(found.size()) + 64)
    throw InputError(source + " holds " + std::to_string(found.size()) + " tensors, but " + spec.architecture +
                     " as its config describes it has " + std::to_string(want_count));
  std::vector<TensorSpec> all = expected_tensors(spec, full_range(spec));
  std::set<std::string> known;
  for (const auto& t : all) known.insert(t.name);
  std::vector<std::string> unexpected, missing, bad_shape;
  for (const auto& [name, t] : found)
    if (!known.count(name) && !ignorable(name, spec)) unexpected.push_back(name);
  std::vector<TensorSpec> need = expected_tensors(spec, range);
  for (const auto& want : need) {
    auto it = found.find(want.name);
    if (it == found.end()) {
      missing.push_back(want.name);
    } else if (it->second.shape != want.shape) {
      bad_shape.push_back(want.name + " is " + shape_str(it->second.shape) + ", expected " + shape_str(want.shape));
    }
  }
  std::string msg;
  if (!missing.empty()) msg += "\n  missing tensors: " + list_names(missing);
  if (!unexpected.empty()) msg += "\n  unexpected tensors: " + list_names(unexpected);
  if (!bad_shape.empty()) msg += "\n  wrong shapes: " + list_names(bad_shape);
  // The config fields that set how many expert tensors there are and their shapes, by
  // their config.json names and GGUF keys.
  if (!msg.empty() && spec.num_experts > 0)
    msg += "\n  the config's experts: num_experts (GGUF expert_count) = " + std::to_string(spec.num_experts) +
           ", num_experts_per_tok (expert_used_count) = " + std::to_string(spec.num_experts_per_tok) +
           ", moe_intermediate_size (expert_feed_forward_length) = " + std::to_string(spec.moe_intermediate_size);
  // Likewise the keys that shape a recurrent mixer's tensors (and its state).
  if (!msg.empty() && spec.mamba2_layers()) {
    const ModelSpec::Mamba2& m = spec.mamba2;
    msg += "\n  the config's mamba-2: mamba_num_heads = " + std::to_string(m.num_heads) + ", mamba_head_dim = " +
           std::to_string(m.head_dim) + ", n_groups = " + std::to_string(m.n_groups) + ", ssm_state_size = " +
           std::to_string(m.state_size) + ", conv_kernel = " + std::to_string(m.conv_kernel) +
           " (so the input projection has " + std::to_string(m.in_proj_rows()) + " rows)";
  } else if (!msg.empty() && spec.has_recurrent_layers()) {
    const ModelSpec::DeltaNet& d = spec.delta_net;
    msg += "\n  the config's gated deltanet: linear_num_key_heads = " + std::to_string(d.num_k_heads) +
           ", linear_num_value_heads = " + std::to_string(d.num_v_heads) + ", linear_key_head_dim = " +
           std::to_string(d.k_head_dim) + ", linear_value_head_dim = " + std::to_string(d.v_head_dim) +
           ", linear_conv_kernel_dim = " + std::to_string(d.conv_kernel);
  }
  if (!msg.empty())
    throw InputError(source + " does not match " + spec.architecture + " as its config describes it:" + msg);
  return need;
}

}  // namespace spark
