// moe_activation.cuh — the experts' gate/up epilogue, shared by the decode GEMVs and the
// grouped GEMM (moe_experts.h): biases, then SwiGLU, plain (Qwen3-MoE) or clamped
// (gpt-oss), Gemma 4's GELU-tanh gate, or the ungated squared ReLU (Nemotron-H), in the CPU
// backend's order of operations (cpu/moe.cpp, cpu/ops.cpp).
#pragma once
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/moe_experts.h"

namespace spark::cuda {

// gate and up: the dot products of stack rows gate_row and up_row with one activation row.
__device__ __forceinline__ float expert_swiglu(const ExpertExtras& x, int64_t gate_row, int64_t up_row, float gate,
                                               float up) {
  if (x.gate_up_bias) {
    gate += __ldg(x.gate_up_bias + gate_row);
    up += __ldg(x.gate_up_bias + up_row);
  }
  if (x.swiglu_limit > 0) {
    const float limit = x.swiglu_limit;
    const float g = limit < gate ? limit : gate;  // std::min's order: NaN stays NaN
    const float lo = up < -limit ? -limit : up;
    const float u = limit < lo ? limit : lo;
    return g / (1.0f + expf(-g * x.swiglu_alpha)) * (u + 1.0f);
  }
  if (x.gelu_tanh) return gelu_tanh(gate) * up;
  return gate / (1.0f + expf(-gate)) * up;
}

// up: the dot product of stack row up_row (an ungated stack's) with one activation row.
// relu(up)^2 as cpu::relu2 computes it (a NaN becomes 0 there too).
__device__ __forceinline__ float expert_relu2(const ExpertExtras& x, int64_t up_row, float up) {
  if (x.gate_up_bias) up += __ldg(x.gate_up_bias + up_row);
  const float r = up > 0 ? up : 0.0f;
  return r * r;
}

// The down projection's output for stack row r: the dot product plus r's bias.
__device__ __forceinline__ float expert_down_out(const ExpertExtras& x, int64_t r, float sum) {
  return x.down_bias ? sum + __ldg(x.down_bias + r) : sum;
}

}  // namespace spark::cuda
