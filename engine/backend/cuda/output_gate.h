// output_gate.h — launchers for the sigmoid gates of Qwen3.5/3.6 and Qwen3-Next: the
// attention output gate and the shared expert's gate.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace spark::cuda {

// attn is the attention output, [rows, width] T (the compute type, __nv_bfloat16 or __half),
// gated in place: attn[t, i] *= sigmoid(gate[t * gate_stride + i]) for i < width, computed in
// f32 and rounded to T. gate_stride >= width lets the gate be the tail of each row of a fused
// projection (the columns after q, k and v). 16-byte vectors when width, gate_stride and both
// pointers allow them, single values otherwise. programmatic: a programmatic dependent launch
// (launch_kernel in common.cuh; sm_90 and later only).
template <typename T>
void apply_output_gate(T* attn, const T* gate, int32_t gate_stride, int32_t rows, int32_t width, cudaStream_t stream,
                       bool programmatic = false);

// The shared expert of Qwen3.5/3.6-MoE and Qwen3-Next joins the routed experts' sum through a
// per-token sigmoid gate: out[t, i] += sigmoid(logit[t * logit_stride]) * y[t, i], all f32;
// out and y are [rows, width], logit one value per row (logit_stride >= 1, so the logit may
// be a column of a wider matrix). A null logit is a gate of 1: Nemotron-H's shared expert
// joins ungated. Vectors of 4 when width and both row pointers allow them.
void add_gated_rows(float* out, const float* y, const float* logit, int32_t logit_stride, int32_t rows, int32_t width,
                    cudaStream_t stream, bool programmatic = false);

}  // namespace spark::cuda
