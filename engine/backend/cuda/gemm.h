// gemm.h — the linear layers: y = x · wᵀ with 16-bit inputs (bf16 or f16, the model's
// HalfType) and f32 accumulation, through cuBLASLt (algorithm chosen once per shape and
// type, then cached) or, for a few rows, a bandwidth-bound kernel (gemv.h) where cuBLAS
// stays short of the memory roofline.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

// HALF: y in the same 16-bit type as x and w; F32: y in f32 (e.g. logits).
enum class GemmOut : uint8_t { HALF, F32 };
enum class GemmPath : uint8_t { AUTO, GEMV, CUBLASLT };

class Gemm {
 public:
  // cuBLASLt's scratch, planned up front, and packed_gemm's split-K partial sums (one stream
  // runs either at a time).
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  Gemm();  // creates the cuBLASLt handle and the workspace on the current device
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[rows, n] = x[rows, k] · w[n, k]ᵀ, all row-major; x and w hold `type` (__nv_bfloat16
  // or __half), y holds `type` or f32 (`out`). k must be a multiple of 8 (16-byte rows).
  // Capturable in a CUDA graph once the same shape and types have run once outside
  // capture (the algorithm search happens on first use). programmatic (sm_90 and later
  // only): a GEMV launch may overlap the kernel before it (gemv.h), so w must not be that
  // kernel's output.
  void linear(HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n, void* y, GemmOut out,
              cudaStream_t stream, GemmPath path = GemmPath::AUTO, bool programmatic = false);

  // The same for a weight matrix in any device format (kernel_args.h). HALF: as above.
  // Packed (Q8_0, q8_0.h; Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, block_formats.h; FP8, fp8.h; k a
  // multiple of the format's block): up to kGemvMaxRows rows through the format's GEMV, which reads
  // the packed bytes once; more rows (or path CUBLASLT) through packed_gemm.h, whose
  // tensor-core tiles decode w into shared memory, so no 16-bit copy of the matrix is
  // written. A chained matrix (parts in different formats) runs part by part, each into
  // its own columns of y.
  void linear(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
              GemmOut out, cudaStream_t stream, GemmPath path = GemmPath::AUTO, bool programmatic = false);

  // The path AUTO takes for this shape.
  GemmPath choose(int32_t rows, int32_t k, int32_t n) const;

 private:
  struct Plan;  // cuBLASLt descriptors and the algorithm chosen for one (type, rows, k, n, out, ldy)
  // `stream` only to refuse planning a new shape during graph capture. ldy: elements
  // between y's rows (n, or more for a block of y's columns).
  const Plan& plan_for(HalfType type, int32_t rows, int32_t k, int32_t n, int32_t ldy, GemmOut out,
                       cudaStream_t stream);
  void cublaslt(HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n, void* y, int32_t ldy,
                GemmOut out, cudaStream_t stream);

  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device memory, kWorkspaceBytes; also packed_gemm's split-K partial sums
  int sms_ = 0;                // the device's SMs, which packed_gemm's split-K fills
  // Keyed by (type, rows, k, n, ldy, out): the algorithm and layouts differ per data type.
  std::map<std::tuple<int, int32_t, int32_t, int32_t, int32_t, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace spark::cuda
