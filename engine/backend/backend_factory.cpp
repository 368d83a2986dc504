// backend_factory.cpp — engine.backend -> a Backend instance.
#include "engine/backend/backend_factory.h"

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/memory_plan.h"
#include "engine/util/check.h"
#if SPARKD_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/device_info.h"
#endif

namespace spark {

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

std::unique_ptr<Backend> make_backend(const Config& config, const ModelSpec& spec, const Weights& weights) {
  const std::string backend = resolve_backend(config);
#if SPARKD_CUDA
  if (backend == "cuda") return std::make_unique<CudaBackend>(spec, weights, cuda_options(config, spec));
#endif
  if (config.engine.cpu_threads < 0) throw InputError("engine.cpu_threads must be >= 0 (0 = every core)");
  return std::make_unique<CpuBackend>(spec, weights, static_cast<int>(config.engine.cpu_threads));
}

#if SPARKD_CUDA
CudaOptions cuda_options(const Config& config, const ModelSpec& spec) {
  CudaOptions o;
  o.f16 = compute_dtype_name(config, spec, "cuda") == "fp16";
  o.fp8_kv = config.engine.kv_cache_dtype == "fp8";
  o.cuda_graphs = config.engine.cuda_graphs;
  o.max_num_seqs = config.engine.max_num_seqs;
  o.max_num_batched_tokens = config.engine.max_num_batched_tokens;
  o.max_model_len = effective_max_model_len(config, spec);
  o.block_size = config.engine.block_size;
  return o;
}
#endif

}  // namespace spark
