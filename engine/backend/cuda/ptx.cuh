// ptx.cuh — every inline-PTX instruction the kernels use, each in one small wrapper:
// tensor-core mma and ldmatrix, cp.async, shared-window loads and stores, the
// L1-bypassing weight load, and the programmatic-launch controls. Under SPARK_CUDA_EMU
// (tests/gpu/emu) the same wrappers call the CPU emulation instead, so the kernels
// themselves compile unchanged for both.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#if SPARK_CUDA_EMU
#include "emu/ptx_ops.h"
#endif

namespace spark::cuda {

// The 32-bit shared-window address of a pointer into shared memory.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; src_bytes 0 writes zeros (rows past the sequence or the causal end).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
#if SPARK_CUDA_EMU
  ::emu::cp_async_16(dst, src, valid ? 16 : 0);
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if SPARK_CUDA_EMU
  ::emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed cp.async groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if SPARK_CUDA_EMU
  ::emu::cp_async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ void st_shared_v4(uint32_t addr, const uint4& v) {
#if SPARK_CUDA_EMU
  ::emu::st_shared_v4(addr, v);
#else
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
#endif
}

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
#if SPARK_CUDA_EMU
  ::emu::st_shared_b32(addr, v);
#else
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
#endif
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
#if SPARK_CUDA_EMU
  return ::emu::ld_shared_v4(addr);
#else
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
#endif
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
#if SPARK_CUDA_EMU
  ::emu::ldmatrix_x4(addr, r, false);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
#endif
}

// The same, each matrix delivered transposed.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
#if SPARK_CUDA_EMU
  ::emu::ldmatrix_x4(addr, r, true);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
#endif
}

// c += A · B with A 16x16 bf16 (a0: rows g, k lo; a1: rows g+8, k lo; a2: rows g, k hi;
// a3: rows g+8, k hi), B 16x8 bf16 (b0: k lo, b1: k hi, column g), c 16x8 f32.
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
#if SPARK_CUDA_EMU
  ::emu::mma_bf16_16816(c, a0, a1, a2, a3, b0, b1);
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// The same with A and B in FP16 (same fragment layout).
__device__ __forceinline__ void mma_f16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
#if SPARK_CUDA_EMU
  ::emu::mma_f16_16816(c, a0, a1, a2, a3, b0, b1);
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// The mma for a compute type T (bf16 or f16): kernels templated on T call this one.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    mma_f16_16816(c, a0, a1, a2, a3, b0, b1);
  else
    mma_bf16_16816(c, a0, a1, a2, a3, b0, b1);
}

// 16 bytes of global memory that is read exactly once: kept out of L1. volatile: a
// guarded load must never be speculated past its bounds check.
__device__ __forceinline__ uint4 ld_global_nc_na_v4(const void* p) {
#if SPARK_CUDA_EMU
  if (reinterpret_cast<uintptr_t>(p) & 15u) ::emu::device_error("ld.global.nc.v4 at %p is not 16-byte aligned", p);
  if (::emu::g_counting_reads) ::emu::count_global_read(p, 16, true);
  uint4 v;
  __builtin_memcpy(&v, p, 16);
  return v;
#else
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
#endif
}

// Programmatic dependent launch (sm_90 and later). A kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization (launch_kernel in common.cuh) may
// start while the kernel ahead of it in the stream still runs; before this call it may
// touch only memory that kernel neither writes nor reads (e.g. weights). Every thread of
// such a launch calls it (the emulator checks this); in a kernel launched normally it
// returns at once.
__device__ __forceinline__ void grid_dependency_wait() {
#if SPARK_CUDA_EMU
  ::emu::grid_dependency_wait();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel in the stream, when it is launched programmatically, start once
// every block of this grid has called this (or exited): its blocks then wait in
// grid_dependency_wait for this whole grid, and its weight loads and launch overlap our
// work. No effect when the next launch is a normal one.
__device__ __forceinline__ void allow_dependent_launch() {
#if !SPARK_CUDA_EMU && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The 128-byte line holding global address p into L2, without waiting for it (nothing to do
// in the emulator): a load that comes later finds it there.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if SPARK_CUDA_EMU
  (void)p;
#else
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// How the decode step's small kernels begin: wait for the kernel ahead, then let the
// next one launch. In this order at most two kernels are in flight, the running one and
// the next one waiting for it.
__device__ __forceinline__ void wait_then_allow_next_kernel() {
  grid_dependency_wait();
  allow_dependent_launch();
}

}  // namespace spark::cuda
