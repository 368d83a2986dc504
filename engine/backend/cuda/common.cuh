// common.cuh — what every CUDA kernel file shares: error checks, kernel launches, the
// bf16/fp8 types, the FP8 KV scale encoding, and warp/block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "engine/backend/cuda/kernel_args.h"
#include "engine/util/check.h"

namespace spark::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

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

// kernel<<<grid, block, smem, stream>>>(args...), and when `programmatic` a programmatic
// dependent launch: the kernel may start while the one ahead of it in `stream` still
// runs, so it must call grid_dependency_wait (ptx.cuh) before it touches memory that
// kernel writes or reads. The caller asks for it only on sm_90 and later. A refused
// launch throws RuntimeError naming the kernel (`name`).
template <typename... P, typename... A>
void launch_kernel(const char* name, bool programmatic, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, A&&... args) {
  cudaLaunchAttribute overlap[1] = {};
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = overlap;
  config.numAttrs = programmatic ? 1 : 0;
#if SPARK_CUDA_EMU
  ::emu::name_next_launch(name);  // its error lines name the kernel, as for <<<>>> launches
#endif
  const cudaError_t err = cudaLaunchKernelEx(&config, kernel, std::forward<A>(args)...);
  if (err != cudaSuccess) cuda_failed(err, name, __FILE__, __LINE__);
}

inline constexpr float kFp8E4m3Max = 448.0f;

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A small unsigned code u (< 2^23) minus kBias as an exact f32 without the int-to-float
// conversion: u sits in the low mantissa bits of 2^23, and one exact subtraction of
// 2^23 + kBias leaves u - kBias. For 8-bit sources, which nvcc converts with I2F (16 a clock
// an SM on sm_90, against 64 integer and 128 FP32 operations); a 32-bit integer's float()
// becomes I2FP, which needs no help (the K-quant readers).
template <int kBias = 0>
__device__ __forceinline__ float code_to_f32(uint32_t u) {
  return __uint_as_float(0x4B000000u | u) - float(8388608 + kBias);
}

// torch's gelu(approximate="tanh") as cpu::gelu_tanh_mul computes it (Gemma's MLP gate).
__device__ __forceinline__ float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

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

// The 16-bit types a model computes in (HalfType in kernel_args.h): conversions and
// 16-byte vectors of 8 values, the unit of every coalesced load and store. Arithmetic is
// f32; rounding back is to nearest even. FP16 saturates at its largest finite value
// (65504): one out-of-range activation then costs precision, where inf would turn every
// value computed from it into inf or NaN. NaN stays NaN.
template <typename T>
__host__ __device__ __forceinline__ float to_f32(T v);
template <>
__host__ __device__ __forceinline__ float to_f32<bf16>(bf16 v) { return __bfloat162float(v); }
template <>
__host__ __device__ __forceinline__ float to_f32<f16>(f16 v) { return __half2float(v); }

template <typename T>
__host__ __device__ __forceinline__ T from_f32(float v);
template <>
__host__ __device__ __forceinline__ bf16 from_f32<bf16>(float v) { return __float2bfloat16(v); }
template <>
__host__ __device__ __forceinline__ f16 from_f32<f16>(float v) {
  constexpr float kMax = 65504.0f;
  return __float2half(v > kMax ? kMax : v < -kMax ? -kMax : v);
}
// For kernels whose output is either the 16-bit type or f32.
template <>
__host__ __device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}

template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_f32(v[i]);
}

template <typename T>
__device__ __forceinline__ void store8(T* p, const float (&f)[8]) {
  uint4 raw;
  T* v = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = from_f32<T>(f[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// f32 rows: eight values are two 16-byte loads or stores.
__device__ __forceinline__ void load8(const float* p, float (&f)[8]) {
  const float4 lo = reinterpret_cast<const float4*>(p)[0], hi = reinterpret_cast<const float4*>(p)[1];
  f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w, f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
}

__device__ __forceinline__ void store8(float* p, const float (&f)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

// Calls f(T{}) with T the C++ type of `type` (f: a generic lambda taking `auto tag`, using
// T = decltype(tag)), so a launcher taking a HalfType dispatches once to its template.
template <typename F>
decltype(auto) with_half_type(HalfType type, F&& f) {
  if (type == HalfType::F16) return f(f16{});
  return f(bf16{});
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
