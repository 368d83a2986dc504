// device.h — the CUDA device built-ins as host C++ over the emulator's fiber scheduler:
// threadIdx & co., barriers, warp shuffles and votes, atomics, math intrinsics, and
// emu::launch (what translate.py turns `kernel<<<...>>>(args)` into).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

#include "emu/vector_types.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;

namespace emu {

// The running fiber's coordinates (blocks run one at a time, fibers one at a time).
extern const uint3* g_thread_idx;
extern uint3 g_block_idx;
extern dim3 g_block_dim, g_grid_dim;

int lane_id();  // linear thread index % 32
void sync_threads();
// Reports a misuse of the CUDA model (divergent collective, bad address, ...) for the
// running launch: printed once, and the launch then fails with cudaErrorLaunchFailure.
void device_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Global-memory read accounting, for the bandwidth checks: between global_reads_begin()
// and global_reads_end(), loads through the read-once path (ld.global.nc.L1::no_allocate,
// ptx.cuh) count all their bytes every time, as each goes to L2/DRAM; loads through the
// cached path (__ldg) count each 32-byte sector (the DRAM/L2 transfer unit) once, as a
// re-read hits the cache. Plain dereferences are not seen: a kernel measured this way
// must read global memory only through those two paths.
//
// dram_bytes is a second count, of the memory global_reads_watch names, under a model of L2
// as what the blocks resident together share: a load of a sector (either path) counts
// unless a block of the same launch read that sector at most `resident_blocks` blocks
// earlier in launch order (blocks run in order here, x fastest, as a GPU dispatches them).
// So a kernel whose blocks re-read one tile close together in the grid reads it from DRAM
// once, and one that comes back to it waves later, or in a later launch, reads it again.
struct GlobalReads {
  uint64_t streamed_bytes = 0;  // read-once loads
  uint64_t cached_bytes = 0;    // distinct sectors of cached loads x 32
  uint64_t dram_bytes = 0;      // watched memory's sectors under the resident-blocks model
  uint64_t total() const { return streamed_bytes + cached_bytes; }
};
extern bool g_counting_reads;
extern uint64_t g_launch_serial;  // counts launches run, for dram_bytes
void count_global_read(const void* p, size_t bytes, bool streamed);
void global_reads_begin(uint32_t resident_blocks = 0);
void global_reads_watch(const void* p, size_t bytes);
GlobalReads global_reads_end();

// One warp collective's exchange area: each lane's input words and output words.
struct WarpSlot {
  uint64_t in[32][6];
  uint32_t out[32][4];
};
using WarpComplete = void (*)(WarpSlot& slot, uint32_t mask, const void* ctx);
// Deposits this lane's `bytes` (<= 48) of input and waits for every lane of `mask`; the
// last lane to arrive runs `complete`. The slot stays valid until this lane's next collective.
const WarpSlot& warp_collective(uint32_t mask, const void* in, size_t bytes, const char* what,
                                WarpComplete complete = nullptr, const void* ctx = nullptr);

// Dynamic shared memory of the running launch, and the 32-bit shared window around it.
void* dynamic_smem();
uint32_t shared_addr(const void* p);
void* shared_ptr(uint32_t addr, size_t bytes);

using KernelBody = std::function<void()>;
// programmatic: launched with cudaLaunchAttributeProgrammaticStreamSerialization.
void launch_impl(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                 KernelBody body, bool programmatic);

template <typename... P, typename... A>
void launch_with(bool programmatic, const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                 cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  // Arguments are converted to the parameter types at the launch, as CUDA copies them then.
  std::tuple<std::decay_t<P>...> copied(std::forward<A>(args)...);
  launch_impl(name, reinterpret_cast<const void*>(kernel), grid, block, smem, stream,
              [kernel, copied]() { std::apply(kernel, copied); }, programmatic);
}

template <typename... P, typename... A>
void launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
            A&&... args) {
  launch_with(false, name, kernel, grid, block, smem, stream, std::forward<A>(args)...);
}

// cudaLaunchKernelEx has no kernel name: the engine's launch helper gives it here first,
// for the error lines. take_launch_name() returns it once, then "cudaLaunchKernelEx".
void name_next_launch(const char* name);
const char* take_launch_name();

template <typename T>
T shuffle(uint32_t mask, T v, int src, bool keep_own, const char* what) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  uint64_t word = 0;
  std::memcpy(&word, &v, sizeof(T));
  const WarpSlot& s = warp_collective(mask, &word, sizeof word, what);
  if (keep_own) return v;
  if (!((mask >> src) & 1u)) {
    device_error("%s reads lane %d, which is not in the mask 0x%08x", what, src, mask);
    return v;
  }
  T r;
  std::memcpy(&r, &s.in[src][0], sizeof(T));
  return r;
}

}  // namespace emu

#define threadIdx (*::emu::g_thread_idx)
#define blockIdx (::emu::g_block_idx)
// Not macros: cudaLaunchConfig_t has members of these names.
inline const dim3& blockDim = ::emu::g_block_dim;
inline const dim3& gridDim = ::emu::g_grid_dim;
constexpr int warpSize = 32;

inline void __syncthreads() { ::emu::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::emu::warp_collective(mask, nullptr, 0, "__syncwarp"); }
inline void __threadfence() {}
inline void __threadfence_block() {}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = ::emu::lane_id();
  return ::emu::shuffle(mask, v, (lane & ~(width - 1)) | (src & (width - 1)), false, "__shfl_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::emu::lane_id(), src = lane ^ lane_mask;
  return ::emu::shuffle(mask, v, src, src >= ((lane / width) + 1) * width, "__shfl_xor_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::emu::lane_id();
  return ::emu::shuffle(mask, v, lane + int(delta), (lane % width) + int(delta) >= width, "__shfl_down_sync");
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::emu::lane_id();
  return ::emu::shuffle(mask, v, lane - int(delta), (lane % width) < int(delta), "__shfl_up_sync");
}

namespace emu {
inline uint32_t vote(uint32_t mask, int pred, const char* what) {
  const uint64_t p = pred != 0;
  const WarpSlot& s = warp_collective(mask, &p, sizeof p, what);
  uint32_t bits = 0;
  for (int l = 0; l < 32; ++l)
    if (((mask >> l) & 1u) && s.in[l][0]) bits |= 1u << l;
  return bits;
}
}  // namespace emu
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::emu::vote(mask, pred, "__ballot_sync"); }
inline int __any_sync(unsigned mask, int pred) { return ::emu::vote(mask, pred, "__any_sync") != 0; }
inline int __all_sync(unsigned mask, int pred) { return ::emu::vote(mask, pred, "__all_sync") == mask; }

// Bit tricks.
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __ffsll(long long v) { return __builtin_ffsll(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(unsigned(v)); }
inline int __clzll(long long v) { return v == 0 ? 64 : __builtin_clzll((unsigned long long)v); }
inline unsigned __brev(unsigned v) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
  return r;
}

// Reinterpretations and math intrinsics (the fast ones computed exactly: the GPU's are
// within a few ulp, and the checks' tolerances are far wider).
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned v; std::memcpy(&v, &f, 4); return v; }
inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float f) { int v; std::memcpy(&v, &f, 4); return v; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }

// CUDA declares the classification functions globally.
using std::isfinite;
using std::isinf;
using std::isnan;

// CUDA's global min / max overloads (integer ones in the common type; floating point as fmin / fmax).
template <typename A, typename B>
  requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
inline auto max(A a, B b) {
  using T = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<T>)
    return T(std::fmax(T(a), T(b)));
  else
    return T(a) < T(b) ? T(b) : T(a);
}
template <typename A, typename B>
  requires std::is_arithmetic_v<A> && std::is_arithmetic_v<B>
inline auto min(A a, B b) {
  using T = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<T>)
    return T(std::fmin(T(a), T(b)));
  else
    return T(b) < T(a) ? T(b) : T(a);
}

// Loads through the read-only / streaming paths are plain loads.
template <typename T>
inline T __ldg(const T* p) {
  if (::emu::g_counting_reads) ::emu::count_global_read(p, sizeof(T), false);
  return *p;
}
template <typename T>
inline T __ldcs(const T* p) { return *p; }
template <typename T>
inline T __ldcg(const T* p) { return *p; }
template <typename T>
inline void __stcs(T* p, T v) { *p = v; }
template <typename T>
inline void __stcg(T* p, T v) { *p = v; }

// Fibers switch only at collectives, so a read-modify-write is atomic.
template <typename T>
inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T>
inline T atomicSub(T* p, T v) { T old = *p; *p = old - v; return old; }
template <typename T>
inline T atomicMax(T* p, T v) { T old = *p; *p = old < v ? v : old; return old; }
template <typename T>
inline T atomicMin(T* p, T v) { T old = *p; *p = v < old ? v : old; return old; }
template <typename T>
inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T>
inline T atomicOr(T* p, T v) { T old = *p; *p = old | v; return old; }
template <typename T>
inline T atomicAnd(T* p, T v) { T old = *p; *p = old & v; return old; }
template <typename T>
inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

inline size_t __cvta_generic_to_shared(const void* p) { return ::emu::shared_addr(p); }
