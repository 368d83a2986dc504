// model_identity.cpp — the model fingerprint, its label and this box's identity for the
// peer handshake.
#include "engine/peer/model_identity.h"

#include <algorithm>
#include <cstring>

#include "engine/model/arch.h"
#include "engine/model/memory_plan.h"
#include "engine/util/check.h"
#include "engine/util/splitmix.h"
#include "engine/util/version.h"

namespace spark {

namespace {

class Hasher {
 public:
  void add(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      word_ = word_ << 8 | b[i];
      if (++fill_ == 8) flush();
    }
  }
  void add(const std::string& s) {
    add(s.data(), s.size());
    add_int(int64_t(s.size()));
  }
  void add_int(int64_t v) { add(&v, sizeof v); }
  void add_double(double v) { add(&v, sizeof v); }
  uint64_t digest() {
    flush();
    return splitmix64(state_ ^ total_);
  }

 private:
  void flush() {
    state_ = splitmix64(state_ ^ word_);
    total_ += fill_;
    word_ = 0;
    fill_ = 0;
  }
  uint64_t state_ = 0x5350524b44ULL, word_ = 0, total_ = 0;
  int fill_ = 0;
};

constexpr size_t kSampleBytes = 64;

}  // namespace

uint64_t model_fingerprint(const ModelInfo& info) {
  const ModelSpec& s = info.spec;
  Hasher h;
  h.add(s.architecture);
  for (int64_t v : {s.vocab_size, s.hidden_size, s.intermediate_size, s.num_layers, s.num_heads, s.num_kv_heads,
                    s.head_dim, s.max_position_embeddings, s.num_experts, s.num_experts_per_tok,
                    s.moe_intermediate_size, int64_t(s.tie_word_embeddings), int64_t(s.attention_bias),
                    int64_t(s.qk_norm)})
    h.add_int(v);
  h.add_double(s.rms_norm_eps);
  h.add_double(s.rope_theta);
  h.add(std::string(model_format_name(info.format)));
  h.add(std::string(dtype_name(info.weight_dtype)));
  h.add(describe_quantization(info.quantize));  // [model] quantize changes what the boxes compute
  for (const auto& [name, t] : info.tensors) {  // std::map: the same order on both boxes
    h.add(name);
    h.add(std::string(dtype_name(t.dtype)));
    for (int64_t d : t.shape) h.add_int(d);
    h.add_int(int64_t(t.nbytes));
    if (t.data == nullptr || t.nbytes == 0) continue;
    const auto* bytes = static_cast<const uint8_t*>(t.data);
    const size_t n = std::min(kSampleBytes, t.nbytes);
    for (size_t at : {size_t(0), t.nbytes / 3, 2 * (t.nbytes / 3), t.nbytes - n})
      h.add(bytes + std::min(at, t.nbytes - n), n);
  }
  return h.digest();
}

std::string model_label(const ModelInfo& info) {
  std::string path = info.path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string quantized =
      info.quantize.active() ? ", quantized at load: " + describe_quantization(info.quantize) : "";
  if (info.format == ModelFormat::DUMMY) return name + " (dummy weights" + quantized + ")";
  uint64_t bytes = 0;
  for (const auto& [n, t] : info.tensors) bytes += t.nbytes;
  return name + " (" + format_bytes(bytes) + " of weights" + quantized + ")";
}

PeerIdentity local_identity(const Config& config, const StagePlan& stage, int64_t kv_blocks) {
  PeerIdentity id;
  id.sparkd_version = version_string();
  id.model_fingerprint = model_fingerprint(stage.info);
  id.model_label = model_label(stage.info);
  id.num_layers = stage.info.spec.num_layers;
  // The split is the head's end and the worker's start.
  id.layer_split = config.peer.role == "worker" ? stage.range.first_layer : stage.range.last_layer;
  id.block_size = config.engine.block_size;
  id.kv_dtype = stage.memory.kv_dtype;
  id.transport = config.peer.transport;
  id.kv_blocks = kv_blocks;
  return id;
}

}  // namespace spark
