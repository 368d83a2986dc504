// swiglu.h — launcher for the SwiGLU activation of the fused gate/up projection.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace spark::cuda {

// gate_up is [rows, 2 * inter] bf16: gate in the first `inter` columns, up in the rest.
// out[t, i] = silu(gate[t, i]) * up[t, i] in f32, rounded to bf16; out is [rows, inter].
void swiglu(const __nv_bfloat16* gate_up, int32_t rows, int32_t inter, __nv_bfloat16* out, cudaStream_t stream);

}  // namespace spark::cuda
