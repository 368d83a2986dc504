// memory_plan.cpp — sizing weights, workspace and the paged KV cache against a budget.
#include "engine/model/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/model/arch.h"
#include "engine/util/check.h"
#include "engine/util/mem_info.h"
#if SPARKD_CUDA
#include "engine/backend/backend_factory.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/device_info.h"
#endif

namespace spark {

namespace {
constexpr uint64_t RESERVE_BYTES = 256ull << 20;
// The CUDA runtime's own allocations after start-up (module images, cuBLASLt), the
// instantiated decode graphs, and allocator slack.
constexpr uint64_t CUDA_RESERVE_BYTES = 1ull << 30;
}

MemoryBudget host_memory_budget() {
  HostMemory m = read_host_memory();
  return MemoryBudget{m.available_bytes, "MemAvailable (" + m.source + ")"};
}

MemoryBudget memory_budget(const std::string& backend) {
#if SPARKD_CUDA
  if (backend == "cuda") {
    auto devices = cuda_devices();
    if (!devices.empty() && !devices[0].integrated)
      return MemoryBudget{static_cast<uint64_t>(std::max<int64_t>(devices[0].free_bytes, 0)),
                          "free memory of " + devices[0].name};
  }
#endif
  return host_memory_budget();
}

std::string format_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

std::string compute_dtype_name(const Config& c, const ModelSpec& s, const std::string& backend) {
  if (backend == "cpu") return "f32";
  if (c.model.dtype == "bf16" || c.model.dtype == "fp16") return c.model.dtype;
  // Qwen2 and Qwen3 were trained in BF16, and their activations are reported to overflow
  // FP16 (inf, then text of "!!!!") in other engines: BF16 whatever the file holds.
  if (s.arch == Arch::QWEN2 || s.arch == Arch::QWEN3 || s.arch == Arch::QWEN3_MOE) return "bf16";
  return s.dtype == DType::BF16 ? "bf16" : "fp16";
}

std::string kv_dtype_name(const Config& c, const ModelSpec& s, const std::string& backend) {
  if (backend == "cpu") return "f32";
  return c.engine.kv_cache_dtype == "fp8" ? "fp8" : compute_dtype_name(c, s, backend);
}

uint64_t kv_bytes_per_token(const Config& c, const ModelSpec& s, const std::string& backend, int64_t layers) {
#if SPARKD_CUDA
  if (backend == "cuda")
    return uint64_t(layers) * CudaBackend::kv_bytes_per_token_layer(s, c.engine.kv_cache_dtype == "fp8");
#endif
  const uint64_t elem = backend == "cpu" ? 4 : c.engine.kv_cache_dtype == "fp8" ? 1 : 2;
  return 2ull * uint64_t(layers) * uint64_t(s.num_kv_heads * s.head_dim) * elem;
}

int64_t effective_max_model_len(const Config& c, const ModelSpec& s) {
  if (c.model.max_model_len <= 0) return s.max_position_embeddings;
  if (c.model.max_model_len > s.max_position_embeddings)
    throw InputError("model.max_model_len = " + std::to_string(c.model.max_model_len) + " exceeds the model's " +
                     std::to_string(s.max_position_embeddings) + " positions");
  return c.model.max_model_len;
}

MemoryPlan plan_memory(const ModelSpec& s, LayerRange range, uint64_t weight_bytes, const Config& c,
                       const MemoryBudget& budget, const std::string& backend) {
  check_range(s, range);
  MemoryPlan p;
  p.architecture = s.architecture;
  p.range = range;
  p.parameter_count = parameter_count(s);
  p.weight_bytes = weight_bytes;
  p.kv_dtype = kv_dtype_name(c, s, backend);
  p.kv_bytes_per_token = kv_bytes_per_token(c, s, backend, range.last_layer - range.first_layer);
#if SPARKD_CUDA
  // Weights in the 16-bit compute type whatever the file holds.
  if (backend == "cuda") p.weight_bytes = CudaBackend::weight_bytes(s, range);
#endif
  p.block_size = c.engine.block_size;
  SPARK_CHECK(p.block_size > 0, "block_size validated by the config");
  p.kv_block_bytes = p.kv_bytes_per_token * static_cast<uint64_t>(p.block_size);

  // Activations are f32 on every backend: one step of max_num_batched_tokens rows holds
  // the residual, the normed input, q/k/v, the attention output and the MLP's gate/up
  // (and the expert router), plus one row of logits per sequence on the last stage.
  // Attention scratch is not counted: the kernels work in tiles with an online softmax.
  bool any_dense = false, any_moe = false;
  for (int64_t l = range.first_layer; l < range.last_layer; ++l) (s.layer_is_moe(l) ? any_moe : any_dense) = true;
  int64_t ffn = std::max(any_dense ? s.intermediate_size : 0,
                         any_moe ? s.moe_intermediate_size * s.num_experts_per_tok : 0);
  int64_t per_token = 4 * s.hidden_size + (s.num_heads + 2 * s.num_kv_heads) * s.head_dim + 2 * ffn +
                      (any_moe ? s.num_experts : 0);
  uint64_t tokens = static_cast<uint64_t>(std::max<int64_t>(c.engine.max_num_batched_tokens, 1));
  p.workspace_bytes = tokens * static_cast<uint64_t>(per_token) * 4;
  if (range.last_layer == s.num_layers)
    p.workspace_bytes += static_cast<uint64_t>(std::max<int64_t>(c.engine.max_num_seqs, 1)) * s.vocab_size * 4;
  p.reserve_bytes = RESERVE_BYTES;
#if SPARKD_CUDA
  if (backend == "cuda") {
    p.workspace_bytes = CudaBackend::workspace_bytes(s, cuda_options(c, s), range);
    p.reserve_bytes = CUDA_RESERVE_BYTES;
  }
#endif

  p.available_bytes = budget.available_bytes;
  p.memory_fraction = c.engine.memory_fraction;
  p.budget_bytes = static_cast<uint64_t>(static_cast<double>(budget.available_bytes) * c.engine.memory_fraction);
  p.budget_source = budget.source;
  p.max_model_len = effective_max_model_len(c, s);
  p.blocks_per_sequence = (p.max_model_len + p.block_size - 1) / p.block_size;

  uint64_t fixed = p.weight_bytes + p.workspace_bytes + p.reserve_bytes;
  uint64_t left = p.budget_bytes > fixed ? p.budget_bytes - fixed : 0;
  p.kv_blocks = p.kv_block_bytes ? static_cast<int64_t>(left / p.kv_block_bytes) : 0;
  p.kv_tokens = p.kv_blocks * p.block_size;
  p.fits = p.kv_blocks >= p.blocks_per_sequence;
  if (!p.fits) {
    std::ostringstream m;
    m << "the model does not fit: budget " << format_bytes(p.budget_bytes) << " (" << p.budget_source << " "
      << format_bytes(p.available_bytes) << " x engine.memory_fraction " << p.memory_fraction << ") - weights "
      << format_bytes(p.weight_bytes) << " - workspace " << format_bytes(p.workspace_bytes) << " - reserve "
      << format_bytes(p.reserve_bytes);
    if (fixed > p.budget_bytes) {
      m << " leaves nothing for the KV cache (short by " << format_bytes(fixed - p.budget_bytes)
        << "); use a smaller or more quantized model, raise engine.memory_fraction, lower "
           "engine.max_num_batched_tokens, or split the model over two boxes (peer mode)";
    } else {
      m << " leaves " << format_bytes(left) << " = " << p.kv_tokens << " KV tokens, but one sequence of "
        << p.max_model_len << " tokens needs " << p.blocks_per_sequence * p.block_size << " ("
        << format_bytes(static_cast<uint64_t>(p.blocks_per_sequence) * p.kv_block_bytes)
        << "); set model.max_model_len to at most " << p.kv_tokens
        << ", use engine.kv_cache_dtype = \"fp8\", or raise engine.memory_fraction";
    }
    p.problem = m.str();
  }
  return p;
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
  o << "  kv cache dtype   " << p.kv_dtype << ", " << p.kv_bytes_per_token << " bytes/token, "
    << format_bytes(p.kv_block_bytes) << " per block of " << p.block_size << " tokens\n";
  o << "  workspace        " << format_bytes(p.workspace_bytes) << " activations + "
    << format_bytes(p.reserve_bytes) << " reserve\n";
  o << "  budget           " << format_bytes(p.budget_bytes) << " = " << format_bytes(p.available_bytes) << " "
    << p.budget_source << " x memory_fraction " << p.memory_fraction << "\n";
  o << "  kv blocks        " << p.kv_blocks << " (" << p.kv_tokens << " tokens, "
    << format_bytes(static_cast<uint64_t>(p.kv_blocks) * p.kv_block_bytes) << ")\n";
  o << "  max_model_len    " << p.max_model_len << " (" << p.blocks_per_sequence << " blocks per full sequence";
  if (p.blocks_per_sequence > 0 && p.fits) o << ", " << p.kv_blocks / p.blocks_per_sequence << " fit at once";
  o << ")\n";
  o << "  fits             " << (p.fits ? "yes" : "NO: " + p.problem) << "\n";
  return o.str();
}

}  // namespace spark
