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
std::unique_ptr<Backend> make_backend(const Config& config, const ModelSpec& spec, const Weights& weights);

}  // namespace spark
