// cpu_backend.h — the reference backend: f32 arithmetic over any supported weight dtype,
// a paged f32 KV cache, multi-threaded over engine.cpu_threads.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/attention.h"
#include "engine/backend/cpu/moe.h"
#include "engine/backend/cpu/ops.h"
#include "engine/model/model_spec.h"
#include "engine/util/thread_pool.h"

namespace spark {

class CpuBackend : public Backend {
 public:
  // Binds the tensors of the layers `weights` holds; throws InputError naming a missing
  // tensor or a shape that disagrees with `spec`. threads: 0 = every core.
  CpuBackend(const ModelSpec& spec, const Weights& weights, int threads);

  std::string describe() const override;
  LayerRange layers() const override { return range_; }
  size_t kv_block_bytes(int64_t block_size) const override;
  void init_kv_cache(int64_t num_blocks, int64_t block_size) override;
  void forward(const Batch& batch, const float* hidden_in, ForwardResult& out) override;

 private:
  struct Layer {
    const Tensor* q = nullptr;
    const Tensor* k = nullptr;
    const Tensor* v = nullptr;
    const Tensor* o = nullptr;
    std::vector<float> q_bias, k_bias, v_bias;  // empty without attention_bias
    std::vector<float> q_norm, k_norm;          // empty without qk_norm
    std::vector<float> attn_norm, ffn_norm;
    const Tensor* gate = nullptr;  // dense MLP; null in an MoE layer
    const Tensor* up = nullptr;
    const Tensor* down = nullptr;
    cpu::MoeWeights moe;  // router set in an MoE layer
  };

  void run_layer(int64_t index, const Batch& batch, float* x);

  ModelSpec spec_;
  LayerRange range_;
  bool has_embedding_ = false;
  bool has_head_ = false;
  const Tensor* embedding_ = nullptr;
  const Tensor* lm_head_ = nullptr;
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  cpu::Rope rope_;
  std::unique_ptr<ThreadPool> pool_;
  cpu::KvGeometry kv_;
  std::vector<cpu::LayerKv> cache_;
  // Activation workspaces, grown to the largest batch seen and reused.
  std::vector<float> x_, h_, q_, k_, v_, att_, gate_, up_;
};

}  // namespace spark
