// weight_readers.cuh — device-side readers of weight rows, one per WeightFormat
// (kernel_args.h), so that a kernel takes the format as a template parameter and is
// written once. A reader covers a stack of matrices of the same shape (the experts of a
// layer): row r of the stack is row r % n of matrix r / n, so a kernel addresses expert
// e's row i as e * n + i.
//
// The interface a kernel uses:
//   kValues            weights per chunk: the unit of one load (a 16-byte vector);
//   Chunk load(r, c)   requests the raw chunk of row r starting at column c (c a multiple
//                      of kValues); weights are read once, so loads bypass L1;
//   decode(q, r, c, w) turns it into kValues f32 weights (the per-block scales, small
//                      and shared by neighbouring lanes, come through the cached path).
// Splitting load from decode lets a kernel request the next chunk before it multiplies
// the current one. A format from GGUF's k-quants plugs in with its own struct: its chunk
// is a slice of a super-block, its decode reads the super-block's scales.
#pragma once
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {

// [rows, k] of the compute type T (bf16 or f16).
template <typename T>
struct HalfRows {
  static constexpr int kValues = 8;
  using Chunk = uint4;
  const T* w;
  int64_t k;
  __device__ __forceinline__ Chunk load(int64_t r, int c) const { return ld_global_nc_na_v4(w + r * k + c); }
  __device__ __forceinline__ void decode(const Chunk& q, int64_t, int, float (&out)[kValues]) const {
    const T* v = reinterpret_cast<const T*>(&q);
#pragma unroll
    for (int i = 0; i < kValues; ++i) out[i] = to_f32(v[i]);
  }
};

// Q8_0 as DeviceMatrix packs it: int8 quants [rows, k], one f16 scale per 32.
struct Q8_0Rows {
  static constexpr int kValues = 16;
  using Chunk = uint4;
  const int8_t* qs;
  const f16* scales;
  int64_t k;
  __device__ __forceinline__ Chunk load(int64_t r, int c) const { return ld_global_nc_na_v4(qs + r * k + c); }
  __device__ __forceinline__ void decode(const Chunk& q, int64_t r, int c, float (&out)[kValues]) const {
    const float d = to_f32(__ldg(scales + r * (k / 32) + c / 32));
    const int8_t* v = reinterpret_cast<const int8_t*>(&q);
#pragma unroll
    for (int i = 0; i < kValues; ++i) out[i] = float(v[i]) * d;
  }
};

// Calls f(reader) with the reader of w ([rows, k]) for compute type T.
template <typename T, typename F>
void with_weight_reader(const DeviceMatrix& w, int64_t k, F&& f) {
  if (w.format == WeightFormat::Q8_0) {
    f(Q8_0Rows{static_cast<const int8_t*>(w.data), static_cast<const f16*>(w.scales), k});
    return;
  }
  f(HalfRows<T>{static_cast<const T*>(w.data), k});
}

}  // namespace spark::cuda
