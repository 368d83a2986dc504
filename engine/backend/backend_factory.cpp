// backend_factory.cpp — engine.backend -> a Backend instance, and its footprint.
#include "engine/backend/backend_factory.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/architecture.h"
#include "engine/model/dummy.h"
#include "engine/model/layer_shape.h"
#include "engine/util/check.h"
#include "engine/util/log.h"
#if SPARKD_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/device_info.h"
#endif

namespace spark {

namespace {
constexpr uint64_t kCpuReserveBytes = 256ull << 20;
// The CUDA runtime's own allocations after start-up (module images, cuBLASLt), the
// instantiated decode graphs, and allocator slack.
constexpr uint64_t kCudaReserveBytes = 1ull << 30;
}  // namespace

std::string resolve_backend(const Config& config) {
  const std::string& name = config.engine.backend;
  if (name != "auto" && name != "cpu" && name != "cuda")
    throw InputError("engine.backend = \"" + name + "\" is not one of \"auto\", \"cuda\", \"cpu\"");
  std::string resolved = "cpu";
#if SPARKD_CUDA
  if (name != "cpu") {
    std::string why;
    const bool have_device = !cuda_devices(&why).empty();
    if (name == "cuda" && !have_device)
      throw InputError("engine.backend = \"cuda\", but no CUDA device can be used (" + why +
                       "); set engine.backend = \"cpu\" or \"auto\"");
    if (have_device) resolved = "cuda";
  }
#else
  if (name == "cuda")
    throw InputError(
        "engine.backend = \"cuda\", but this sparkd was built without CUDA; "
        "set engine.backend = \"cpu\" or \"auto\"");
#endif
  if (resolved == "cpu" && config.engine.kv_cache_dtype == "fp8")
    throw InputError(
        "engine.kv_cache_dtype = \"fp8\" needs the CUDA backend; the CPU backend keeps its KV cache in "
        "f32 (set kv_cache_dtype = \"auto\")");
  return resolved;
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

std::string compute_dtype_name(const Config& c, const ModelSpec& s, const std::string& backend) {
  if (backend == "cpu") return "f32";
  if (c.model.dtype == "bf16" || c.model.dtype == "fp16") return c.model.dtype;
  // Models trained in BF16 (the Qwen families) are reported to overflow FP16 activations
  // (inf, then text of "!!!!") in other engines: BF16 whatever the file holds.
  if (s.arch && s.arch->needs_bf16_activations) return "bf16";
  return s.dtype == DType::BF16 ? "bf16" : "fp16";
}

// The checkpoint's k_scale / v_scale are checked (nvfp4_weights.cpp) and not used: the FP8
// cache scales each token's head by a power of two of its own (kernel_args.h), which keeps
// every value within E4M3's relative step where one calibrated scale a layer clips the
// tokens above its calibration and spends range on the small ones.
bool fp8_kv_cache(const Config& c, const ModelSpec& s) {
  return c.engine.kv_cache_dtype == "fp8" || (c.engine.kv_cache_dtype == "auto" && s.kv_cache_fp8);
}

#if SPARKD_CUDA
namespace {
// Weights as the device keeps them: GGUF block, FP8 and MXFP4 expert matrices packed,
// the rest in the 16-bit type. A dummy is planned as make_dummy_weights stores it.
void plan_cuda_layout(const Config& c, const ModelInfo& info, LayerRange range, bool fp8, StageFootprint& f) {
  const ModelSpec& s = info.spec;
  std::unordered_map<std::string, DType> dummy_dtypes;
  if (info.format == ModelFormat::DUMMY)
    for (const TensorSpec& t : expected_tensors(s, full_range(s)))
      dummy_dtypes.emplace(t.name, dummy_tensor_dtype(s, t, info.weight_dtype));
  const StoredDType stored = [&info, &dummy_dtypes](Part part, int64_t layer) {
    const std::string name = tensor_name(part, layer, part_is_per_expert(part) ? 0 : -1);  // expert 0 for all
    return info.format == ModelFormat::DUMMY ? dummy_dtypes.at(name) : info.tensors.at(name).dtype;
  };
  const StoredDType served = served_dtypes(stored, info.quantize, s);
  f.weight_bytes = CudaBackend::weight_bytes(s, range, served);
  f.weight_bytes_per_token = CudaBackend::weight_bytes_per_token(s, range, served);
  f.kv_bytes_per_token = CudaBackend::kv_bytes_per_token(s, range, fp8);
  f.kv_bytes_per_token_sliding = CudaBackend::kv_bytes_per_token(s, range, fp8, /*sliding_only=*/true);
  f.workspace_bytes = CudaBackend::workspace_bytes(s, cuda_options(c, s), range);
  f.reserve_bytes = kCudaReserveBytes;
}
}  // namespace
#endif

StageFootprint stage_footprint(const Config& c, const ModelInfo& info, LayerRange range, const std::string& backend) {
  const ModelSpec& s = info.spec;
  check_range(s, range);
  // Recurrent layers keep no K and V (their state is counted per sequence).
  StageFootprint f;
  f.state_bytes_per_sequence = recurrent_state_bytes(s, range);
  if (backend == "cpu") {
    f.kv_dtype = "f32";
    f.weight_bytes = stage_weight_bytes(info, range);  // read as stored, through the mapping
    f.kv_bytes_per_token = CpuBackend::kv_bytes_per_token(s, range);
    f.kv_bytes_per_token_sliding = CpuBackend::kv_bytes_per_token(s, range, /*sliding_only=*/true);
    f.workspace_bytes = CpuBackend::workspace_bytes(s, range, c.engine.max_num_batched_tokens, c.engine.max_num_seqs);
    f.reserve_bytes = kCpuReserveBytes;
    f.sliding_kv_window_only = true;  // CpuBackend::init_windowed_kv_cache
    return f;
  }
  const bool fp8 = fp8_kv_cache(c, s);
  f.kv_dtype = fp8 ? "fp8" : compute_dtype_name(c, s, backend);
  f.sliding_kv_window_only = true;  // CudaBackend::init_windowed_kv_cache
#if SPARKD_CUDA
  plan_cuda_layout(c, info, range, fp8, f);
#else
  // Without the CUDA backend's own layout: weights as stored, 16-bit or FP8 KV.
  f.weight_bytes = stage_weight_bytes(info, range);
  const KvTokenSize kv = kv_token_size(s, range), kv_sliding = kv_token_size(s, range, /*sliding_only=*/true);
  f.kv_bytes_per_token = kv.values * (fp8 ? 1 : 2);
  f.kv_bytes_per_token_sliding = kv_sliding.values * (fp8 ? 1 : 2);
  f.workspace_bytes = CpuBackend::workspace_bytes(s, range, c.engine.max_num_batched_tokens, c.engine.max_num_seqs);
  f.reserve_bytes = kCpuReserveBytes;
#endif
  return f;
}

std::unique_ptr<Backend> make_backend(const Config& config, const ModelSpec& spec, const StageWeights& stage) {
  const std::string backend = resolve_backend(config);
#if SPARKD_CUDA
  if (backend == "cuda") return std::make_unique<CudaBackend>(spec, stage, cuda_options(config, spec));
#endif
  if (config.engine.cpu_threads < 0) throw InputError("engine.cpu_threads must be >= 0 (0 = every core)");
  if (spec.kv_cache_fp8)
    log_info("the checkpoint's FP8 KV cache (kv_cache_quant_algo) is not taken: the CPU backend keeps its KV in f32");
  return std::make_unique<CpuBackend>(spec, stage, static_cast<int>(config.engine.cpu_threads));
}

#if SPARKD_CUDA
CudaOptions cuda_options(const Config& config, const ModelSpec& spec) {
  CudaOptions o;
  o.f16 = compute_dtype_name(config, spec, "cuda") == "fp16";
  o.fp8_kv = fp8_kv_cache(config, spec);
  o.cuda_graphs = config.engine.cuda_graphs;
  o.max_num_seqs = config.engine.max_num_seqs;
  o.max_num_batched_tokens = config.engine.max_num_batched_tokens;
  o.max_model_len = effective_max_model_len(config, spec);
  o.block_size = config.engine.block_size;
  o.quantize = weight_quantization(config.model);
  return o;
}
#endif

}  // namespace spark
