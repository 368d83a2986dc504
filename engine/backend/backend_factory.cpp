// backend_factory.cpp — engine.backend -> a Backend instance.
#include "engine/backend/backend_factory.h"

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/util/check.h"

namespace spark {

std::string resolve_backend(const Config& config) {
  const std::string& name = config.engine.backend;
  if (name == "cuda")
    // No CUDA backend is compiled into sparkd yet, whatever the build flags.
    throw InputError("engine.backend = \"cuda\", but this sparkd has no CUDA backend; "
                     "set engine.backend = \"cpu\" or \"auto\"");
  if (name != "auto" && name != "cpu")
    throw InputError("engine.backend = \"" + name + "\" is not one of \"auto\", \"cuda\", \"cpu\"");
  if (config.engine.kv_cache_dtype == "fp8")
    throw InputError("engine.kv_cache_dtype = \"fp8\" needs the CUDA backend; the CPU backend keeps its KV cache in "
                     "f32 (set kv_cache_dtype = \"auto\")");
  return "cpu";
}

std::unique_ptr<Backend> make_backend(const Config& config, const ModelSpec& spec, const Weights& weights) {
  resolve_backend(config);
  if (config.engine.cpu_threads < 0) throw InputError("engine.cpu_threads must be >= 0 (0 = every core)");
  return std::make_unique<CpuBackend>(spec, weights, static_cast<int>(config.engine.cpu_threads));
}

}  // namespace spark
