// memory_plan.h — the up-front memory plan: weights, activation workspace, KV blocks.
#pragma once
#include <cstdint>
#include <string>

#include "engine/config.h"
#include "engine/model/model_spec.h"
#include "engine/model/weights.h"

namespace spark {

// What may be allocated. On a unified-memory box (GB10) and on CPU-only machines this
// is the OS's MemAvailable, because cudaMemGetInfo over-reports there and there is no
// swap to absorb a mistake; a discrete GPU backend passes its device free memory.
struct MemoryBudget {
  uint64_t available_bytes = 0;
  std::string source;  // "MemAvailable (/proc/meminfo)", "cuda device free memory", ...
};
MemoryBudget host_memory_budget();
// The budget for `backend` (resolve_backend) on this machine: a discrete CUDA GPU's free
// memory for "cuda" on one, else host_memory_budget() (CPU backend, or an integrated GPU
// that shares host memory, as on GB10).
MemoryBudget memory_budget(const std::string& backend);

struct MemoryPlan {
  std::string architecture;
  LayerRange range;
  int64_t parameter_count = 0;   // whole model
  uint64_t weight_bytes = 0;     // what this stage holds
  std::string kv_dtype;          // "bf16", "fp16", "f32", "fp8"
  uint64_t kv_bytes_per_token = 0;  // K and V, all held layers
  int64_t block_size = 0;
  uint64_t kv_block_bytes = 0;
  uint64_t workspace_bytes = 0;  // activations of one max_num_batched_tokens step + logits
  uint64_t reserve_bytes = 0;    // runtime, allocator slack, CUDA graph pools
  uint64_t available_bytes = 0;
  double memory_fraction = 0;
  uint64_t budget_bytes = 0;     // available x memory_fraction
  std::string budget_source;
  int64_t max_model_len = 0;
  int64_t kv_blocks = 0;         // that fit in what the budget leaves
  int64_t kv_tokens = 0;
  int64_t blocks_per_sequence = 0;  // blocks one max_model_len sequence needs
  bool fits = false;
  std::string problem;           // why it does not fit, with the numbers and what to change
};

// The 16-bit type the CUDA backend computes in ("bf16" or "fp16"): model.dtype when set,
// else BF16 for BF16 checkpoints and for the Qwen families (FP16 overflows their
// activations), and FP16 for all others (FP16 and F32 checkpoints, GGUF blocks), whose
// values FP16 keeps closer. The CPU backend computes in "f32".
std::string compute_dtype_name(const Config& config, const ModelSpec& spec, const std::string& backend);
// KV element as `backend` stores it: the CPU backend keeps f32; the CUDA backend the
// configured kv_cache_dtype ("auto" = the compute dtype; "fp8" = 1 byte plus scales).
std::string kv_dtype_name(const Config& config, const ModelSpec& spec, const std::string& backend);
// Bytes of K and V one token takes in `layers` layers as `backend` stores them (FP8 on
// CUDA adds one scale byte per KV head).
uint64_t kv_bytes_per_token(const Config& config, const ModelSpec& spec, const std::string& backend, int64_t layers);
// The model's context limit under model.max_model_len; InputError if it asks for more
// than the model supports.
int64_t effective_max_model_len(const Config& config, const ModelSpec& spec);

MemoryPlan plan_memory(const ModelSpec& spec, LayerRange range, uint64_t weight_bytes, const Config& config,
                       const MemoryBudget& budget, const std::string& backend);
// Throws InputError with plan.problem when the plan does not fit.
void require_fits(const MemoryPlan& plan);
// A few aligned lines for `sparkd check` and the startup log.
std::string describe_plan(const MemoryPlan& plan);
std::string format_bytes(uint64_t bytes);  // "1.50 GiB"

}  // namespace spark
