// gemm.h — the linear layers: y = x · wᵀ with bf16 inputs and f32 accumulation, through
// cuBLASLt (algorithm chosen once per shape, then cached) or, for a few rows, a
// bandwidth-bound kernel (gemv.h) where cuBLAS stays short of the memory roofline.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace spark::cuda {

enum class GemmOut : uint8_t { BF16, F32 };
enum class GemmPath : uint8_t { AUTO, GEMV, CUBLASLT };

class Gemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLASLt's scratch, planned up front

  Gemm();  // creates the cuBLASLt handle and the workspace on the current device
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[rows, n] = x[rows, k] · w[n, k]ᵀ, all row-major; y is bf16 or f32 (`out`). k must be
  // a multiple of 8 (16-byte rows). Capturable in a CUDA graph once the same shape has
  // run once outside capture (the algorithm search happens on first use).
  void linear(const __nv_bfloat16* x, int32_t rows, int32_t k, const __nv_bfloat16* w, int32_t n, void* y, GemmOut out,
              cudaStream_t stream, GemmPath path = GemmPath::AUTO);

  // The path AUTO takes for this shape.
  GemmPath choose(int32_t rows, int32_t k, int32_t n) const;

 private:
  struct Plan;  // cuBLASLt descriptors and the algorithm chosen for one (rows, k, n, out)
  // `stream` only to refuse planning a new shape during graph capture.
  const Plan& plan_for(int32_t rows, int32_t k, int32_t n, GemmOut out, cudaStream_t stream);

  void* handle_ = nullptr;     // cublasLtHandle_t
  void* workspace_ = nullptr;  // device memory, kWorkspaceBytes
  std::map<std::tuple<int32_t, int32_t, int32_t, int>, std::unique_ptr<Plan>> plans_;
};

}  // namespace spark::cuda
