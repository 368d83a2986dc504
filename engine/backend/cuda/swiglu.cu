// swiglu.cu — SwiGLU (or Gemma's GELU-tanh gate) over the fused [gate | up] projection
// output, the squared ReLU, and the biased exact GELU. All memory-bound: per 8 values one or two 16-byte loads and one store
// (the GELU also 32 bias bytes, from L1/L2: one row of them serves every row).
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/swiglu.h"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 8 outputs, flat over rows * inter / 8: two 16-byte loads (gate, up) and
// one 16-byte store. silu uses the accurate expf, the GELU gate tanhf (torch's
// gelu(approximate="tanh"), as cpu::gelu_tanh_mul): this is memory-bound either way.
template <typename T, bool kGeluTanh>
__global__ void swiglu_kernel(const T* __restrict__ gate_up, int32_t inter, int64_t total_chunks, T* __restrict__ out) {
  wait_then_allow_next_kernel();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= total_chunks) return;
  const int64_t chunks_per_row = inter / 8;
  const int64_t t = c / chunks_per_row, col = (c - t * chunks_per_row) * 8;
  const T* g_row = gate_up + t * 2 * int64_t(inter);
  float g[8], u[8], o[8];
  load8(g_row + col, g);
  load8(g_row + inter + col, u);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float x = g[k];
    o[k] = kGeluTanh ? gelu_tanh(x) * u[k] : x / (1.0f + expf(-x)) * u[k];
  }
  store8(out + t * inter + col, o);
}

// One thread per 8 values, in place.
template <typename T>
__global__ void relu2_kernel(T* __restrict__ x, int64_t chunks) {
  wait_then_allow_next_kernel();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  float v[8];
  load8(x + c * 8, v);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float r = v[k] > 0.0f ? v[k] : 0.0f;
    v[k] = r * r;
  }
  store8(x + c * 8, v);
}

// One thread per 8 values, in place, flat over rows * n / 8. erff is the accurate one (the
// CPU's std::erf to a few ulp): this is memory-bound either way.
template <typename T>
__global__ void bias_gelu_kernel(T* __restrict__ x, const float* __restrict__ bias, int32_t n, int64_t chunks) {
  wait_then_allow_next_kernel();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  const int64_t col = c * 8 % n;
  float v[8], b[8];
  load8(x + c * 8, v);
  load8(bias + col, b);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float u = v[k] + b[k];
    v[k] = 0.5f * u * (1.0f + erff(u * 0.70710678118654752f));
  }
  store8(x + c * 8, v);
}

}  // namespace

template <typename T>
void swiglu(const T* gate_up, int32_t rows, int32_t inter, T* out, cudaStream_t stream, bool programmatic,
            bool gelu_tanh) {
  SPARK_CHECK(rows >= 0, "swiglu: negative rows");
  SPARK_CHECK(inter > 0 && inter % 8 == 0, "swiglu: inter must be a positive multiple of 8");
  SPARK_CHECK(reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0,
              "swiglu: gate_up and out must be 16-byte aligned");
  if (rows == 0) return;
  const int64_t total_chunks = int64_t(rows) * (inter / 8);
  const int64_t blocks = ceil_div(total_chunks, kThreads);
  if (gelu_tanh)
    launch_kernel("swiglu_kernel", programmatic, swiglu_kernel<T, true>, dim3(unsigned(blocks)), dim3(kThreads), 0,
                  stream, gate_up, inter, total_chunks, out);
  else
    launch_kernel("swiglu_kernel", programmatic, swiglu_kernel<T, false>, dim3(unsigned(blocks)), dim3(kThreads), 0,
                  stream, gate_up, inter, total_chunks, out);
}

template <typename T>
void relu2(T* x, int64_t n, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(n >= 0 && n % 8 == 0, "relu2: n must be a multiple of 8");
  SPARK_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "relu2: x must be 16-byte aligned");
  if (n == 0) return;
  const int64_t chunks = n / 8;
  launch_kernel("relu2_kernel", programmatic, relu2_kernel<T>, dim3(unsigned(ceil_div(chunks, kThreads))),
                dim3(kThreads), 0, stream, x, chunks);
}

template <typename T>
void bias_gelu(T* x, const float* bias, int32_t rows, int32_t n, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(rows >= 0 && n > 0 && n % 8 == 0, "bias_gelu: n must be a positive multiple of 8");
  SPARK_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(bias) % 16 == 0,
              "bias_gelu: x and bias must be 16-byte aligned");
  if (rows == 0) return;
  const int64_t chunks = int64_t(rows) * (n / 8);
  launch_kernel("bias_gelu_kernel", programmatic, bias_gelu_kernel<T>, dim3(unsigned(ceil_div(chunks, kThreads))),
                dim3(kThreads), 0, stream, x, bias, n, chunks);
}

template void swiglu<bf16>(const bf16*, int32_t, int32_t, bf16*, cudaStream_t, bool, bool);
template void swiglu<f16>(const f16*, int32_t, int32_t, f16*, cudaStream_t, bool, bool);

template void relu2<bf16>(bf16*, int64_t, cudaStream_t, bool);
template void relu2<f16>(f16*, int64_t, cudaStream_t, bool);

template void bias_gelu<bf16>(bf16*, const float*, int32_t, int32_t, cudaStream_t, bool);
template void bias_gelu<f16>(f16*, const float*, int32_t, int32_t, cudaStream_t, bool);

}  // namespace spark::cuda
