// backend_factory.h — picks the compute backend named by engine.backend, tells the memory
// plan what it will allocate, and builds it.
#pragma once
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/config.h"
#include "engine/model/memory_plan.h"
#include "engine/model/model_loader.h"
#include "engine/model/model_spec.h"
#include "engine/model/stage_weights.h"

namespace spark {

// What engine.backend resolves to on this machine: "cpu", or "cuda" when this sparkd has
// the CUDA backend and a device exists ("auto" picks it then; "cuda" without one throws
// InputError saying why, as does an fp8 KV cache on the CPU).
std::string resolve_backend(const Config& config);

// The budget for `backend` on this machine: a discrete CUDA GPU's free memory for "cuda"
// on one, else host_memory_budget() (CPU backend, or an integrated GPU that shares host
// memory, as on GB10).
MemoryBudget memory_budget(const std::string& backend);

// The 16-bit type the CUDA backend computes in ("bf16" or "fp16"): model.dtype when set,
// else BF16 for BF16 checkpoints and for the Qwen families (FP16 overflows their
// activations), and FP16 for all others (FP16 and F32 checkpoints, GGUF blocks), whose
// values FP16 keeps closer. The CPU backend computes in "f32".
std::string compute_dtype_name(const Config& config, const ModelSpec& spec, const std::string& backend);

// Whether the CUDA backend keeps its KV cache in FP8: engine.kv_cache_dtype = "fp8", or
// "auto" on a checkpoint calibrated for it (ModelOpt's kv_cache_quant_algo FP8).
bool fp8_kv_cache(const Config& config, const ModelSpec& spec);

// What `backend` will allocate for a stage holding `range`, asked before anything is
// allocated: weights as that backend keeps them, KV bytes per token and their dtype,
// activation workspace and runtime reserve.
StageFootprint stage_footprint(const Config& config, const ModelInfo& info, LayerRange range,
                               const std::string& backend);

// Builds the resolved backend over the bound tensors of `stage`, whose Weights must
// outlive it.
std::unique_ptr<Backend> make_backend(const Config& config, const ModelSpec& spec, const StageWeights& stage);

#if SPARKD_CUDA
struct CudaOptions;
// The CUDA backend's sizes from the config (they size its buffers and the memory plan).
CudaOptions cuda_options(const Config& config, const ModelSpec& spec);
#endif

}  // namespace spark
