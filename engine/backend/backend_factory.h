// backend_factory.h — picks and builds the compute backend named by engine.backend.
#pragma once
#include <memory>

#include "engine/backend/backend.h"
#include "engine/config.h"
#include "engine/model/model_spec.h"

namespace spark {

// What engine.backend resolves to on this machine: "cpu", or "cuda" when this sparkd has
// the CUDA backend and a device exists ("auto" picks it then; "cuda" without one throws
// InputError saying why, as does an fp8 KV cache on the CPU). Memory plans use it for the
// budget and for the KV element size the backend really stores.
std::string resolve_backend(const Config& config);

// Builds the resolved backend; it reads the tensors of `weights`, which must outlive it.
std::unique_ptr<Backend> make_backend(const Config& config, const ModelSpec& spec, const Weights& weights);

#if SPARKD_CUDA
struct CudaOptions;
// The CUDA backend's sizes from the config (they size its buffers and the memory plan).
CudaOptions cuda_options(const Config& config, const ModelSpec& spec);
#endif

}  // namespace spark
