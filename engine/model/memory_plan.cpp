// memory_plan.cpp — sizing weights, workspace and the paged KV cache against a budget.
#include "engine/model/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/model/arch.h"
#include "engine/util/check.h"
#include "engine/util/mem_info.h"

namespace spark {

MemoryBudget host_memory_budget() {
  HostMemory m = read_host_memory();
  return MemoryBudget{m.available_bytes, "MemAvailable (" + m.source + ")"};
}

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

int64_t effective_max_model_len(const Config& c, const ModelSpec& s) {
  if (c.model.max_model_len <= 0) return s.max_position_embeddings;
  if (c.model.max_model_len > s.max_position_embeddings)
    throw InputError("model.max_model_len = " + std::to_string(c.model.max_model_len) + " exceeds the model's " +
                     std::to_string(s.max_position_embeddings) + " positions");
  return c.model.max_model_len;
}

MemoryPlan plan_memory(const ModelSpec& s, LayerRange range, const StageFootprint& f, const Config& c,
                       const MemoryBudget& budget) {
  check_range(s, range);
  MemoryPlan p;
  p.architecture = s.architecture;
  p.range = range;
  p.parameter_count = parameter_count(s);
  p.weight_bytes = f.weight_bytes;
  p.weight_bytes_per_token = f.weight_bytes_per_token;
  p.mixture_of_experts = s.num_experts > 0;
  p.kv_dtype = f.kv_dtype;
  p.kv_bytes_per_token = f.kv_bytes_per_token;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) p.sliding_layers += s.layer_is_sliding(l) ? 1 : 0;
  if (p.sliding_layers > 0) {
    p.sliding_window = s.sliding_window;
    p.kv_bytes_per_token_sliding = f.kv_bytes_per_token_sliding;
  }
  p.block_size = c.engine.block_size;
  SPARK_CHECK(p.block_size > 0, "block_size validated by the config");
  p.draft_weight_bytes = f.draft_weight_bytes;
  p.draft_kv_bytes_per_token = f.draft_kv_bytes_per_token;
  p.draft_workspace_bytes = f.draft_workspace_bytes;
  p.kv_block_bytes = (p.kv_bytes_per_token + p.draft_kv_bytes_per_token) * static_cast<uint64_t>(p.block_size);
  p.kv_sliding_block_bytes = p.kv_bytes_per_token_sliding * static_cast<uint64_t>(p.block_size);
  const bool drafts = p.draft_weight_bytes > 0;
  p.window_only =
      f.sliding_kv_window_only && !drafts && p.sliding_layers > 0 && p.kv_sliding_block_bytes < p.kv_block_bytes;
  p.workspace_bytes = f.workspace_bytes;
  p.reserve_bytes = f.reserve_bytes;
  p.state_bytes_per_sequence = f.state_bytes_per_sequence;
  // With drafts, each sequence's state has a snapshot beside it (Batch::state_copies).
  p.state_snapshots = p.state_bytes_per_sequence > 0 && c.engine.speculates();
  p.state_checkpoints = p.state_bytes_per_sequence > 0 ? c.engine.checkpoint_slots() : 0;
  p.state_slots =
      p.state_bytes_per_sequence > 0 ? c.engine.max_num_seqs * (p.state_snapshots ? 2 : 1) + p.state_checkpoints : 0;
  const uint64_t state_bytes = p.state_bytes_per_sequence * uint64_t(p.state_slots);

  p.available_bytes = budget.available_bytes;
  p.memory_fraction = c.engine.memory_fraction;
  p.budget_bytes = static_cast<uint64_t>(static_cast<double>(budget.available_bytes) * c.engine.memory_fraction);
  p.budget_source = budget.source;
  p.max_model_len = effective_max_model_len(c, s);
  p.blocks_per_sequence = (p.max_model_len + p.block_size - 1) / p.block_size;

  uint64_t fixed =
      p.weight_bytes + p.workspace_bytes + p.reserve_bytes + state_bytes + p.draft_weight_bytes + p.draft_workspace_bytes;
  uint64_t left = p.budget_bytes > fixed ? p.budget_bytes - fixed : 0;
  p.kv_blocks = p.kv_block_bytes ? static_cast<int64_t>(left / p.kv_block_bytes) : 0;
  // A stage of recurrent layers only (a hybrid split for peer mode) keeps no K or V: its
  // block tables cost nothing, so every sequence may have its full length.
  if (p.kv_block_bytes == 0 && fixed <= p.budget_bytes) p.kv_blocks = c.engine.max_num_seqs * p.blocks_per_sequence;
  p.kv_window_blocks = p.kv_blocks;
  const int64_t window_blocks =
      window_blocks_needed(p.sliding_window, p.block_size, c.engine.max_num_seqs, c.engine.max_num_batched_tokens);
  if (p.window_only && uint64_t(window_blocks) * p.kv_block_bytes < left) {
    p.kv_window_blocks = window_blocks;
    p.kv_blocks = window_blocks + static_cast<int64_t>((left - uint64_t(window_blocks) * p.kv_block_bytes) /
                                                       (p.kv_block_bytes - p.kv_sliding_block_bytes));
  }
  p.kv_tokens = p.kv_blocks * p.block_size;
  p.fits = p.kv_blocks >= p.blocks_per_sequence;
  if (!p.fits) {
    std::ostringstream m;
    m << "the model does not fit: budget " << format_bytes(p.budget_bytes) << " (" << p.budget_source << " "
      << format_bytes(p.available_bytes) << " x engine.memory_fraction " << p.memory_fraction << ") - weights "
      << format_bytes(p.weight_bytes) << " - workspace " << format_bytes(p.workspace_bytes) << " - reserve "
      << format_bytes(p.reserve_bytes);
    if (state_bytes > 0) m << " - recurrent state " << format_bytes(state_bytes);
    if (drafts)
      m << " - draft model " << format_bytes(p.draft_weight_bytes) << " weights, "
        << format_bytes(p.draft_workspace_bytes) << " workspace";
    if (fixed > p.budget_bytes) {
      m << " leaves nothing for the KV cache (short by " << format_bytes(fixed - p.budget_bytes)
        << "); use a smaller or more quantized model, raise engine.memory_fraction, lower "
           "engine.max_num_batched_tokens, or split the model over two boxes (peer mode)";
    } else {
      m << " leaves " << format_bytes(left) << " = " << p.kv_tokens << " KV tokens, but one sequence of "
        << p.max_model_len << " tokens needs " << p.blocks_per_sequence * p.block_size << " ("
        << format_bytes(kv_cache_bytes(p, p.blocks_per_sequence))
        << "); set model.max_model_len to at most " << p.kv_tokens
        << (p.kv_dtype == "bf16" || p.kv_dtype == "fp16" ? ", use engine.kv_cache_dtype = \"fp8\"," : "")
        << " or raise engine.memory_fraction";
    }
    p.problem = m.str();
  }
  return p;
}

int64_t window_blocks_needed(int64_t window, int64_t block_size, int64_t max_num_seqs, int64_t max_num_batched_tokens) {
  // A sequence keeps the blocks from the one its window starts in to its newest token:
  // at most ceil((window - 1) / block_size) + 1, plus one its new tokens start in; the
  // step's tokens fill ceil(max_num_batched_tokens / block_size) more.
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  return max_num_seqs * (cdiv(std::max<int64_t>(window - 1, 0), block_size) + 2) + cdiv(max_num_batched_tokens, block_size);
}

uint64_t kv_cache_bytes(const MemoryPlan& p, int64_t blocks) { return kv_cache_bytes(p, blocks, p.kv_window_blocks); }

uint64_t kv_cache_bytes(const MemoryPlan& p, int64_t blocks, int64_t window_blocks) {
  const auto window = uint64_t(std::min(blocks, window_blocks));
  return uint64_t(blocks) * p.kv_block_bytes - (uint64_t(blocks) - window) * p.kv_sliding_block_bytes;
}

void require_fits(const MemoryPlan& p) {
  if (!p.fits) throw InputError(p.problem);
}

std::string describe_plan(const MemoryPlan& p) {
  std::ostringstream o;
  char params[32];
  std::snprintf(params, sizeof params, "%.3f B", p.parameter_count / 1e9);
  o << "memory plan (layers [" << p.range.first_layer << ", " << p.range.last_layer << "))\n";
  o << "  parameters       " << params << " (" << p.parameter_count << ")\n";
  o << "  weights          " << format_bytes(p.weight_bytes) << "\n";
  if (p.weight_bytes_per_token)
    o << "  read per token   " << format_bytes(p.weight_bytes_per_token)
      << " of them by a batch-1 decode step"
      << (p.mixture_of_experts ? " (of the MoE layers: the router and the active experts)" : "") << "\n";
  o << "  kv cache dtype   " << p.kv_dtype << ", " << p.kv_bytes_per_token << " bytes/token, "
    << format_bytes(p.kv_block_bytes) << " per block of " << p.block_size << " tokens\n";
  if (p.sliding_layers > 0 && p.window_only) {
    o << "  sliding layers   " << p.sliding_layers << " of " << (p.range.last_layer - p.range.first_layer)
      << " see the last " << p.sliding_window << " tokens and hold " << p.kv_window_blocks << " of the "
      << p.kv_blocks << " blocks (the windows of engine.max_num_seqs sequences and one step's tokens; "
      << p.kv_bytes_per_token_sliding << " of the " << p.kv_bytes_per_token << " bytes/token)\n";
  } else if (p.sliding_layers > 0) {
    // What the window alone needs of one full sequence: the blocks its last
    // sliding_window - 1 tokens and the newest token can span.
    const int64_t window_blocks =
        std::min(p.blocks_per_sequence, (p.sliding_window - 1 + p.block_size - 1) / p.block_size + 1);
    o << "  sliding layers   " << p.sliding_layers << " of " << (p.range.last_layer - p.range.first_layer)
      << " see the last " << p.sliding_window << " tokens; the cache keeps every token for them too ("
      << p.kv_bytes_per_token_sliding << " of the " << p.kv_bytes_per_token << " bytes/token; the window alone needs "
      << window_blocks * p.block_size << " of a sequence's tokens)\n";
  }
  if (p.state_slots > 0)
    o << "  recurrent state  " << format_bytes(p.state_bytes_per_sequence) << " per sequence x " << p.state_slots
      << (p.state_snapshots ? " (engine.max_num_seqs, each with its snapshot for drafts" : " (engine.max_num_seqs")
      << (p.state_checkpoints > 0 ? ", + " + std::to_string(p.state_checkpoints) + " engine.state_checkpoints) = " : ") = ")
      << format_bytes(p.state_bytes_per_sequence * uint64_t(p.state_slots))
      << ", beside the KV cache\n";
  if (p.draft_weight_bytes > 0)
    o << "  draft model      " << format_bytes(p.draft_weight_bytes) << " weights, "
      << format_bytes(p.draft_workspace_bytes) << " workspace, " << p.draft_kv_bytes_per_token
      << " bytes/token of K and V in every block beside the model's\n";
  o << "  workspace        " << format_bytes(p.workspace_bytes) << " activations + "
    << format_bytes(p.reserve_bytes) << " reserve\n";
  o << "  budget           " << format_bytes(p.budget_bytes) << " = " << format_bytes(p.available_bytes) << " "
    << p.budget_source << " x memory_fraction " << p.memory_fraction << "\n";
  o << "  kv blocks        " << p.kv_blocks << " (" << p.kv_tokens << " tokens, "
    << format_bytes(kv_cache_bytes(p, p.kv_blocks)) << ")\n";
  o << "  max_model_len    " << p.max_model_len << " (" << p.blocks_per_sequence << " blocks per full sequence";
  if (p.blocks_per_sequence > 0 && p.fits) o << ", " << p.kv_blocks / p.blocks_per_sequence << " fit at once";
  o << ")\n";
  o << "  fits             " << (p.fits ? "yes" : "NO: " + p.problem) << "\n";
  return o.str();
}

}  // namespace spark
