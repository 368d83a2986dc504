// swiglu.cu — SwiGLU over the fused [gate | up] projection output.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/swiglu.h"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 8 outputs, flat over rows * inter / 8: two 16-byte loads (gate, up) and
// one 16-byte store. silu uses the accurate expf: this is memory-bound either way.
__global__ void swiglu_kernel(const bf16* __restrict__ gate_up, int32_t inter, int64_t total_chunks,
                              bf16* __restrict__ out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= total_chunks) return;
  const int64_t chunks_per_row = inter / 8;
  const int64_t t = c / chunks_per_row, col = (c - t * chunks_per_row) * 8;
  const bf16* g_row = gate_up + t * 2 * int64_t(inter);
  const uint4 g_raw = *reinterpret_cast<const uint4*>(g_row + col);
  const uint4 u_raw = *reinterpret_cast<const uint4*>(g_row + inter + col);
  const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&g_raw);
  const __nv_bfloat162* u2 = reinterpret_cast<const __nv_bfloat162*>(&u_raw);
  uint4 o_raw;
  __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(&o_raw);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 g = __bfloat1622float2(g2[k]), u = __bfloat1622float2(u2[k]);
    const float a = g.x / (1.0f + expf(-g.x)) * u.x;
    const float b = g.y / (1.0f + expf(-g.y)) * u.y;
    o2[k] = __floats2bfloat162_rn(a, b);
  }
  *reinterpret_cast<uint4*>(out + t * inter + col) = o_raw;
}

}  // namespace

void swiglu(const bf16* gate_up, int32_t rows, int32_t inter, bf16* out, cudaStream_t stream) {
  SPARK_CHECK(rows >= 0, "swiglu: negative rows");
  SPARK_CHECK(inter > 0 && inter % 8 == 0, "swiglu: inter must be a positive multiple of 8");
  SPARK_CHECK(reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
              "swiglu: gate_up and out must be 16-byte aligned");
  if (rows == 0) return;
  const int64_t total_chunks = int64_t(rows) * (inter / 8);
  const int64_t blocks = ceil_div(total_chunks, kThreads);
  swiglu_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(gate_up, inter, total_chunks, out);
  CUDA_CHECK_LAUNCH();
}

}  // namespace spark::cuda
