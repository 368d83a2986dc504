// gate_up_gemv.h — the dense MLP's decode in one pass: gate and up projections of a
// packed gate_up matrix (DeviceLayer::gate_up) and SwiGLU, writing the activated product.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

// Whether gate_up_swiglu_gemv reads `gate_up` ([2 * inter, k]: gate rows, then up rows):
// a packed format (not HALF), the same for both halves, held as one segment or as a
// chain of the gate part and the up part (FP8 keeps a scale grid per part), with k whole
// blocks of it (block_values, block_formats.h).
bool gate_up_fusable(const DeviceMatrix& gate_up, int32_t inter, int32_t k);

// act[t, i] = silu(x[t] · gate_i) * (x[t] · up_i) for t < rows (1..kGemvMaxRows), i <
// inter: x [rows, k] and act [rows, inter] of the 16-bit `type`, f32 dot products (not
// rounded to 16 bits between the projections and SwiGLU). Capturable; `programmatic` as
// for gemv (gemv.h).
void gate_up_swiglu_gemv(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& gate_up,
                         int32_t inter, void* act, cudaStream_t stream, bool programmatic = false);

}  // namespace spark::cuda
