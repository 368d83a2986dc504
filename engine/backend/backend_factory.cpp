// backend_factory.cpp — engine.backend -> a Backend instance.
#include "engine/backend/backend_factory.h"

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/util/check.h"

namespace spark {

std::unique_ptr<Backend> make_backend(const Config& config, const ModelSpec& spec, const Weights& weights) {
  const std::string& name = config.engine.backend;
  if (name == "cuda")
    // No CUDA backend is compiled into sparkd yet, whatever the build flags.
    throw InputError("engine.backend = \"cuda\", but this sparkd has no CUDA backend; "
                     "set engine.backend = \"cpu\" or \"auto\"");
  if (name != "auto" && name != "cpu")
    throw InputError("engine.backend = \"" + name + "\" is not one of \"auto\", \"cuda\", \"cpu\"");
  if (config.engine.cpu_threads < 0) throw InputError("engine.cpu_threads must be >= 0 (0 = every core)");
  return std::make_unique<CpuBackend>(spec, weights, static_cast<int>(config.engine.cpu_threads));
}

}  // namespace spark
