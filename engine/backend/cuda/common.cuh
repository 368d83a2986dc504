// common.cuh — what every CUDA kernel file shares: error checks, the bf16/fp8 types,
// the FP8 KV scale encoding, and warp/block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/kernel_args.h"
#include "engine/util/check.h"

namespace spark::cuda {

using bf16 = __nv_bfloat16;

// A failed CUDA call is a runtime failure (device lost, out of memory), not a bug in
// the caller's input: it throws RuntimeError naming the call and file:line.
[[noreturn]] void cuda_failed(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace spark::cuda

#define CUDA_CHECK(expr)                                                                              \
  do {                                                                                                \
    cudaError_t spark_err_ = (expr);                                                                  \
    if (spark_err_ != cudaSuccess) ::spark::cuda::cuda_failed(spark_err_, #expr, __FILE__, __LINE__); \
  } while (0)
// After every kernel launch: catches bad launch configurations at the launch site.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

namespace spark::cuda {

inline constexpr float kFp8E4m3Max = 448.0f;

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// FP8 KV scales are powers of two kept as a biased exponent byte (value = e4m3 * 2^(e - 127)),
// so a scale costs 1 byte per head vector and the cache holds 2x the tokens of BF16
// (less 1/head_dim). Decoding is a shift: no table, no division.
__device__ __forceinline__ float fp8_scale_value(uint8_t e) { return __uint_as_float(uint32_t(e) << 23); }

// The exponent byte of the smallest power of two s with amax / s <= 448.
__device__ __forceinline__ uint8_t fp8_scale_for(float amax) {
  if (!(amax > 0.0f)) return 127;  // zeros (or NaN): scale 1
  int e = 0;
  frexpf(amax / kFp8E4m3Max, &e);  // amax / 448 = m * 2^e with m in [0.5, 1): 2^e >= it
  e = max(-126, min(127, e));
  return uint8_t(e + 127);
}

__device__ __forceinline__ uint8_t fp8_encode(float v, float inv_scale) {
  return __nv_cvt_float_to_fp8(v * inv_scale, __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float fp8_decode(uint8_t q, float scale) {
  __half_raw h = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
  return __half2float(__half(h)) * scale;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. `scratch` is 32 floats of shared memory, reusable after the call returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace spark::cuda
