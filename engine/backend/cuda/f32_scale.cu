// f32_scale.cu — the in-place scalings of f32_scale.h: one thread a value, memory-bound
// (n x 8 bytes; the logits of a decode step of 1 row at a 262,144-token vocabulary: 2 MiB).
#include "engine/backend/cuda/f32_scale.h"

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;

template <bool kCap>
__global__ void scale_kernel(float* __restrict__ x, int64_t n, float s) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = kCap ? tanhf(x[i] / s) * s : x[i] * s;
}

__global__ void add_scale_kernel(float* __restrict__ x, const float* __restrict__ delta, int64_t n,
                                 const float* __restrict__ s) {
  wait_then_allow_next_kernel();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (delta ? x[i] + delta[i] : x[i]) * s[0];
}

template <bool kCap>
void launch(float* x, int64_t n, float s, cudaStream_t stream) {
  SPARK_CHECK(n >= 0 && (n == 0 || x), "f32 scale: bad arguments");
  if (n == 0) return;
  launch_kernel("scale_kernel", false, scale_kernel<kCap>, dim3(unsigned(ceil_div(n, kThreads))), dim3(kThreads), 0,
                stream, x, n, s);
}

}  // namespace

void scale_f32(float* x, int64_t n, float s, cudaStream_t stream) { launch<false>(x, n, s, stream); }

void add_scale_f32(float* x, const float* delta, int64_t n, const float* s, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(n >= 0 && (n == 0 || (x && s)), "add_scale_f32: bad arguments");
  if (n == 0) return;
  launch_kernel("add_scale_kernel", programmatic, add_scale_kernel, dim3(unsigned(ceil_div(n, kThreads))),
                dim3(kThreads), 0, stream, x, delta, n, s);
}

void softcap_f32(float* x, int64_t n, float cap, cudaStream_t stream) {
  SPARK_CHECK(cap > 0, "softcap_f32: cap must be positive");
  launch<true>(x, n, cap, stream);
}

}  // namespace spark::cuda
