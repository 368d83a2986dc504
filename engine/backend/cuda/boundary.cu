// boundary.cu — f32 residual stream <-> 16-bit hidden states at a pipeline stage boundary.
//
// Both kernels are pure streams: per value 4 bytes of f32 one way and 2 bytes of T the
// other, no FLOPs to speak of. One thread per 8 values (a 32-byte f32 load or store and a
// 16-byte T one). A decode micro-batch of 100 tokens of Qwen2.5-32B (hidden 5120) is 512K
// values: 256 blocks of 256 threads, ~2 waves on GB10's 48 SMs and one on H100's 132,
// 3 MB of traffic, a few microseconds at either's bandwidth: small beside the layers.
#include "engine/backend/cuda/boundary.h"
#include "engine/backend/cuda/common.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void to_16bit_kernel(const float* __restrict__ x, int64_t chunks, T* __restrict__ out) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  float v[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = x[c * 8 + k];
  store8(out + c * 8, v);
}

template <typename T>
__global__ void from_16bit_kernel(const T* __restrict__ in, int64_t chunks, float* __restrict__ x) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= chunks) return;
  float v[8];
  load8(in + c * 8, v);
#pragma unroll
  for (int k = 0; k < 8; ++k) x[c * 8 + k] = v[k];
}

void check_args(const void* a, const void* b, int64_t n) {
  SPARK_CHECK(n >= 0 && n % 8 == 0, "stage boundary: the value count must be a multiple of 8");
  SPARK_CHECK(reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0,
              "stage boundary: buffers must be 16-byte aligned");
}

}  // namespace

template <typename T>
void hidden_to_16bit(const float* x, int64_t n, T* out, cudaStream_t stream) {
  check_args(x, out, n);
  if (n == 0) return;
  const int64_t chunks = n / 8;
  launch_kernel("hidden_to_16bit", false, to_16bit_kernel<T>, dim3(unsigned(ceil_div(chunks, kThreads))),
                dim3(kThreads), 0, stream, x, chunks, out);
}

template <typename T>
void hidden_from_16bit(const T* in, int64_t n, float* x, cudaStream_t stream) {
  check_args(in, x, n);
  if (n == 0) return;
  const int64_t chunks = n / 8;
  launch_kernel("hidden_from_16bit", false, from_16bit_kernel<T>, dim3(unsigned(ceil_div(chunks, kThreads))),
                dim3(kThreads), 0, stream, in, chunks, x);
}

template void hidden_to_16bit<bf16>(const float*, int64_t, bf16*, cudaStream_t);
template void hidden_to_16bit<f16>(const float*, int64_t, f16*, cudaStream_t);
template void hidden_from_16bit<bf16>(const bf16*, int64_t, float*, cudaStream_t);
template void hidden_from_16bit<f16>(const f16*, int64_t, float*, cudaStream_t);

}  // namespace spark::cuda
