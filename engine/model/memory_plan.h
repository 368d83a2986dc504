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

// What a backend will allocate for a stage besides the KV cache, and how it stores KV:
// the chosen backend answers (backend_factory.h, stage_footprint) before anything is
// allocated.
struct StageFootprint {
  std::string kv_dtype;             // "bf16", "fp16", "f32", "fp8"
  uint64_t weight_bytes = 0;        // the stage's weights as the backend keeps them
  uint64_t weight_bytes_per_token = 0;  // of those, what a batch-1 decode step reads (MoE: k experts); 0: unknown
  uint64_t kv_bytes_per_token = 0;  // K and V, all held layers
  uint64_t kv_bytes_per_token_sliding = 0;  // of those, the sliding-window layers'
  uint64_t state_bytes_per_sequence = 0;  // recurrent layers' state of one sequence
  uint64_t workspace_bytes = 0;     // activations of the largest step, logits, scratch
  uint64_t reserve_bytes = 0;       // runtime, allocator slack, CUDA graph pools
  // The backend keeps sliding-window layers' K and V for the window blocks only
  // (Backend::init_windowed_kv_cache, Batch::block_copies).
  bool sliding_kv_window_only = false;
  // speculative = "draft" (engine/core/draft_model.h): the draft model beside this stage
  // as its backend allocates it. Its KV cache has as many blocks as this stage's.
  uint64_t draft_weight_bytes = 0;
  uint64_t draft_kv_bytes_per_token = 0;
  uint64_t draft_workspace_bytes = 0;  // activations, reserve, and any recurrent states
};

struct MemoryPlan {
  std::string architecture;
  LayerRange range;
  int64_t parameter_count = 0;   // whole model
  uint64_t weight_bytes = 0;     // what this stage holds
  uint64_t weight_bytes_per_token = 0;  // what a batch-1 decode step reads of them; 0: unknown
  bool mixture_of_experts = false;      // a decode step reads only the routed experts
  std::string kv_dtype;          // "bf16", "fp16", "f32", "fp8"
  uint64_t kv_bytes_per_token = 0;  // K and V, all held layers
  // Sliding-window layers among the held ones (gpt-oss: every other layer, 128 tokens).
  // Their attention reads only the last sliding_window tokens. kv_bytes_per_token counts
  // every held layer; kv_bytes_per_token_sliding are the sliding layers' part of it.
  int64_t sliding_layers = 0;
  int64_t sliding_window = 0;
  uint64_t kv_bytes_per_token_sliding = 0;
  int64_t block_size = 0;
  uint64_t kv_block_bytes = 0;   // one block in every held layer (and the draft model's)
  // With window_only (a backend that can, some held layers full-attention), the
  // sliding layers hold only the first kv_window_blocks blocks: enough for the windows
  // of max_num_seqs sequences and one step's tokens (BlockManager); the others cost
  // kv_block_bytes - kv_sliding_block_bytes. Otherwise kv_window_blocks == kv_blocks.
  bool window_only = false;
  uint64_t kv_sliding_block_bytes = 0;
  int64_t kv_window_blocks = 0;
  // Recurrent layers (hybrids): the state each running sequence holds, kept for
  // engine.max_num_seqs sequences beside the KV cache, twice with speculation (each
  // sequence's snapshot from before its drafts), and state_checkpoints more for prompts
  // that resume (engine/core/state_checkpoints.h).
  uint64_t state_bytes_per_sequence = 0;
  int64_t state_slots = 0;
  bool state_snapshots = false;
  int64_t state_checkpoints = 0;
  // A draft model beside the stage (StageFootprint): every block holds its K and V too,
  // and every sliding layer keeps all blocks (the draft's cache follows the block tables).
  uint64_t draft_weight_bytes = 0;
  uint64_t draft_kv_bytes_per_token = 0;
  uint64_t draft_workspace_bytes = 0;
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

// The model's context limit under model.max_model_len; InputError if it asks for more
// than the model supports.
int64_t effective_max_model_len(const Config& config, const ModelSpec& spec);

MemoryPlan plan_memory(const ModelSpec& spec, LayerRange range, const StageFootprint& footprint, const Config& config,
                       const MemoryBudget& budget);
// Throws InputError with plan.problem when the plan does not fit.
void require_fits(const MemoryPlan& plan);
// The bytes of a cache of `blocks` blocks, the first min(blocks, kv_window_blocks) of them
// in every layer.
uint64_t kv_cache_bytes(const MemoryPlan& plan, int64_t blocks);
// The same with the sliding layers holding `window_blocks` blocks (a pipeline worker's
// cache, sized by the head's session).
uint64_t kv_cache_bytes(const MemoryPlan& plan, int64_t blocks, int64_t window_blocks);
// The window blocks a cache needs so that max_num_seqs sequences can each keep the blocks
// their window spans plus their share of a max_num_batched_tokens step.
int64_t window_blocks_needed(int64_t window, int64_t block_size, int64_t max_num_seqs, int64_t max_num_batched_tokens);
// A few aligned lines for `sparkd check` and the startup log.
std::string describe_plan(const MemoryPlan& plan);
std::string format_bytes(uint64_t bytes);  // "1.50 GiB"

}  // namespace spark
