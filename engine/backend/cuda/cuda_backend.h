// cuda_backend.h — the GPU backend: BF16 or FP16 weights in device memory, a paged KV
// cache in that type or FP8, cuBLASLt GEMMs, fused kernels, CUDA graphs for decode steps, and sampling on
// the device. Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE (moe.h), gpt-oss, and the hybrids
// Qwen3.5/3.6 and Qwen3-Next (Gated DeltaNet layers, delta_net.h), Nemotron-H (Mamba-2,
// mamba2.h), Gemma 3 and 4 and Gemma 4's assistant (assistant.h). No CUDA headers here.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/load_quantization.h"
#include "engine/model/model_spec.h"
#include "engine/model/stage_weights.h"

namespace spark {

struct CudaOptions {
  int device = 0;
  bool f16 = false;         // compute in FP16, else BF16 (compute_dtype_name in backend_factory.h)
  bool fp8_kv = false;      // engine.kv_cache_dtype = "fp8"
  bool cuda_graphs = true;  // engine.cuda_graphs
  // The decode step's kernels start while the kernel before them finishes, the GEMVs
  // streaming weights meanwhile (programmatic dependent launch, sm_90 and later). Off
  // only to measure what it gains.
  bool programmatic_launch = true;
  int64_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_model_len = 4096;
  int64_t block_size = 16;
  WeightQuantization quantize;  // [model] quantize: matrices packed as Q8_0 or FP8 on the way up
};

// How the steps ran (for checks): decode steps (one row per sequence) and small steps
// with a sequence of several rows (draft verification, a short prefill), each through a
// replayed graph, one captured then, or eagerly (graphs off, a bucket's first use, a step
// larger than every bucket).
struct CudaStepCounts {
  int64_t decode_replayed = 0, decode_captured = 0, decode_eager = 0;
  int64_t multi_row_replayed = 0, multi_row_captured = 0, multi_row_eager = 0;
  int64_t multi_row_most_rows = 0;  // the largest such step
};

class CudaBackend : public Backend {
 public:
  // Uploads the tensors of the layers `weights` holds (converted to the compute type) and allocates
  // every activation buffer for the largest step the options allow. Throws InputError
  // naming a missing tensor, a wrong shape or an unsupported model, RuntimeError when the
  // device fails or lacks the memory.
  CudaBackend(const ModelSpec& spec, const StageWeights& weights, const CudaOptions& options);
  ~CudaBackend() override;

  std::string describe() const override;
  LayerRange layers() const override;
  size_t kv_block_bytes(int64_t block_size) const override;
  void init_kv_cache(int64_t num_blocks, int64_t block_size) override;
  // Sliding-window layers hold the first num_window_blocks blocks; Batch::block_copies run
  // in the full-attention layers before the step (kv_block_copy.h).
  void init_windowed_kv_cache(int64_t num_blocks, int64_t num_window_blocks, int64_t block_size) override;
  // The hybrids' recurrent states, f32 in device memory (Gated DeltaNet, delta_net.h).
  void init_state_slots(int64_t num_slots) override;
  // Gemma 4's assistant beside its model on the same device (engine/backend/cuda/assistant.h).
  void attach_model(const Backend& model) override;
  // Every decode graph bucket run once eagerly and captured (decode_graphs.h).
  void warm_up() override;
  void forward(const Batch& batch, const float* hidden_in, ForwardResult& out) override;
  bool samples_on_device() const override;
  int64_t rows_at_decode_cost() const override;
  void forward_sample(const Batch& batch, const float* hidden_in, const std::vector<SampleRow>& rows,
                      StepOutput& out) override;
  bool boundary_on_device() const override { return true; }
  DeviceHidden forward_to_boundary(const Batch& batch) override;
  DeviceHidden boundary_input(size_t tokens) override;
  CudaStepCounts step_counts() const;

  // Device memory a backend holding `range` allocates besides weights and KV cache
  // (activations for the largest step, logits, cuBLASLt, attention and sampler
  // workspaces), for the memory plan.
  static uint64_t workspace_bytes(const ModelSpec& spec, const CudaOptions& options, LayerRange range);
  // Device bytes of the weights of `range` as the device keeps them: Q8_0 matrices packed,
  // the rest 16-bit (`stored`: each part's dtype in the file).
  static uint64_t weight_bytes(const ModelSpec& spec, LayerRange range, const StoredDType& stored);
  // The weight bytes a batch-1 decode step reads (an MoE layer: router and top_k experts).
  static uint64_t weight_bytes_per_token(const ModelSpec& spec, LayerRange range, const StoredDType& stored);
  // KV bytes one token keeps in the layers of `range` (the sliding ones only, with
  // sliding_only): K and V, plus the FP8 scale bytes.
  static uint64_t kv_bytes_per_token(const ModelSpec& spec, LayerRange range, bool fp8_kv, bool sliding_only = false);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spark
