// backend_factory.h — picks and builds the compute backend named by engine.backend.
#pragma once
#include <memory>

#include "engine/backend/backend.h"
#include "engine/config.h"
#include "engine/model/model_spec.h"

namespace spark {

// "cpu" builds the CPU backend with engine.cpu_threads threads; "auto" picks CUDA when
// this binary has a CUDA backend and a device exists, otherwise the CPU; "cuda" without
// one throws InputError saying so. The backend reads the tensors of `weights`, which must
// outlive it.
// What engine.backend resolves to on this machine: "cpu" (this sparkd has no CUDA backend
// yet: "auto" picks the CPU and "cuda" throws InputError saying so, as does an fp8 KV
// cache, which only the CUDA backend will store). Memory plans use it
// for the budget and for the KV element size the backend really stores.
std::string resolve_backend(const Config& config);

std::unique_ptr<Backend> make_backend(const Config& config, const ModelSpec& spec, const Weights& weights);

}  // namespace spark
