// gemm.cu — Gemm (gemm.h) over cuBLASLt, with the small-batch kernel (gemv.h) for decode.
//
// cuBLASLt is column-major; our tensors are row-major. A row-major [r, c] matrix is the
// same bytes as a column-major c x r matrix, so y[rows, n] = x[rows, k] · w[n, k]ᵀ reads,
// in cuBLASLt's terms, D (n x rows, ld n) = op(A)·B with A = w as a column-major k x n
// matrix (ld k) taken transposed, and B = x as a column-major k x rows matrix (ld k).
#include <cublasLt.h>

#include <string>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/gemv.h"
#include "engine/backend/cuda/block_formats.h"
#include "engine/backend/cuda/fp8.h"
#include "engine/backend/cuda/nvfp4.h"
#include "engine/backend/cuda/packed_gemm.h"
#include "engine/backend/cuda/q8_0.h"

namespace spark::cuda {
namespace {

[[noreturn]] void cublas_failed(cublasStatus_t status, const char* expr, const char* file, int line) {
  throw ::spark::RuntimeError(std::string("cuBLAS error ") + cublasLtGetStatusName(status) + " (" +
                              std::to_string(int(status)) + ", " + cublasLtGetStatusString(status) + ") in " + expr +
                              " at " + file + ":" + std::to_string(line));
}

}  // namespace
}  // namespace spark::cuda

#define CUBLAS_CHECK(expr)                                                    \
  do {                                                                        \
    cublasStatus_t spark_status_ = (expr);                                    \
    if (spark_status_ != CUBLAS_STATUS_SUCCESS)                               \
      ::spark::cuda::cublas_failed(spark_status_, #expr, __FILE__, __LINE__); \
  } while (0)

namespace spark::cuda {
namespace {

// AUTO sends a batch of at most this many rows to the GEMV kernel, larger ones to cuBLASLt.
// The GEMV kernel takes up to kGemvMaxRows (8) rows, and at 1..8 rows it streams the
// weights near the copy bandwidth where cuBLASLt's small-M kernels fall short. To
// re-measure on a new device: `make gpu-check` and read check_gemm's "bench" rows, which
// give both paths' µs for every Llama-3.1-8B shape at rows 1, 2, 4 and 8; lower this when
// cuBLASLt wins at the larger row counts.
constexpr int32_t kGemvCrossoverRows = kGemvMaxRows;

// Every pointer Gemm hands cuBLASLt is 16-byte aligned (checked in linear()); the
// heuristic assumes 256 unless told, and could pick kernels that need it.
constexpr uint32_t kMinAlignment = 16;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

cudaDataType_t cuda_type(HalfType type) { return type == HalfType::F16 ? CUDA_R_16F : CUDA_R_16BF; }
const char* type_name(HalfType type) { return type == HalfType::F16 ? "f16" : "bf16"; }

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // w: column-major k x n, ld k (used transposed)
  cublasLtMatrixLayout_t b = nullptr;  // x: column-major k x rows, ld k
  cublasLtMatrixLayout_t d = nullptr;  // y: column-major n x rows, ld n (also C; beta = 0)
  cublasLtMatmulAlgo_t algo{};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    // Destruction cannot report failure; these only free host memory.
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

Gemm::Gemm() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, device));
  cublasLtHandle_t handle = nullptr;
  CUBLAS_CHECK(cublasLtCreate(&handle));
  handle_ = handle;
  // The constructor's own cleanup: the destructor does not run when it throws.
  if (cudaError_t err = cudaMalloc(&workspace_, kWorkspaceBytes); err != cudaSuccess) {
    cublasLtDestroy(handle);
    handle_ = nullptr;
    cuda_failed(err, "cudaMalloc(&workspace_, kWorkspaceBytes)", __FILE__, __LINE__);
  }
}

Gemm::~Gemm() {
  plans_.clear();
  // Work queued with the workspace may still run: cudaFree waits for the device first.
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

GemmPath Gemm::choose(int32_t rows, int32_t /*k*/, int32_t /*n*/) const {
  return rows <= kGemvCrossoverRows ? GemmPath::GEMV : GemmPath::CUBLASLT;
}

const Gemm::Plan& Gemm::plan_for(HalfType type, int32_t rows, int32_t k, int32_t n, int32_t ldy, GemmOut out,
                                  cudaStream_t stream) {
  const auto key = std::make_tuple(int(type), rows, k, n, ldy, int(out));
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;

  // A new shape must be planned (and its kernel loaded by its first run) outside graph
  // capture: say so here rather than fail obscurely inside cuBLASLt or at graph launch.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  SPARK_CHECK(capture == cudaStreamCaptureStatusNone,
              std::string("Gemm: ") + type_name(type) + " shape rows=" + std::to_string(rows) +
                  " k=" + std::to_string(k) + " n=" + std::to_string(n) +
                  " first used inside CUDA graph capture; run it once before capturing");

  auto plan = std::make_unique<Plan>();
  const cudaDataType_t in_type = cuda_type(type);
  const cudaDataType_t out_type = out == GemmOut::F32 ? CUDA_R_32F : in_type;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, in_type, uint64_t(k), uint64_t(n), int64_t(k)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in_type, uint64_t(k), uint64_t(rows), int64_t(k)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, out_type, uint64_t(n), uint64_t(rows), int64_t(ldy)));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  {
    const uint64_t workspace = kWorkspaceBytes;
    status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                  sizeof workspace);
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      if (status == CUBLAS_STATUS_SUCCESS)
        status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &kMinAlignment, sizeof kMinAlignment);
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), plan->op, plan->a, plan->b,
                                              plan->d, plan->d, pref, 1, &result, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(status);
  if (found < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError("cuBLASLt has no algorithm for rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                       " n=" + std::to_string(n) + " (" + type_name(type) + " in, " +
                       (out == GemmOut::F32 ? "f32" : type_name(type)) + " out)");
  SPARK_CHECK(result.workspaceSize <= kWorkspaceBytes, "cuBLASLt algorithm wants more than the workspace");
  plan->algo = result.algo;
  return *plans_.emplace(key, std::move(plan)).first->second;
}

void Gemm::linear(HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n, void* y, GemmOut out,
                  cudaStream_t stream, GemmPath path, bool programmatic) {
  SPARK_CHECK(rows >= 0 && k > 0 && n > 0, "Gemm::linear: bad shape rows=" + std::to_string(rows) +
                                               " k=" + std::to_string(k) + " n=" + std::to_string(n));
  SPARK_CHECK(k % 8 == 0, "Gemm::linear: k must be a multiple of 8, got " + std::to_string(k));
  SPARK_CHECK(aligned16(x) && aligned16(w) && aligned16(y), "Gemm::linear: x, w and y must be 16-byte aligned");
  if (rows == 0) return;
  if (path == GemmPath::AUTO) path = choose(rows, k, n);
  if (path == GemmPath::GEMV) {
    gemv(type, x, rows, k, w, n, y, out, stream, programmatic);
    return;
  }
  cublaslt(type, x, rows, k, w, n, y, n, out, stream);
}

void Gemm::cublaslt(HalfType type, const void* x, int32_t rows, int32_t k, const void* w, int32_t n, void* y,
                    int32_t ldy, GemmOut out, cudaStream_t stream) {
  const Plan& plan = plan_for(type, rows, k, n, ldy, out, stream);
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), plan.op, &alpha, w, plan.a, x, plan.b, &beta, y,
                              plan.d, y, plan.d, &plan.algo, workspace_, kWorkspaceBytes, stream));
}

void Gemm::linear(HalfType type, const void* x, int32_t rows, int32_t k, const DeviceMatrix& w, int32_t n, void* y,
                  GemmOut out, cudaStream_t stream, GemmPath path, bool programmatic) {
  if (w.format == WeightFormat::HALF && !w.tail)
    return linear(type, x, rows, k, w.data, n, y, out, stream, path, programmatic);
  SPARK_CHECK(rows >= 0 && k > 0 && n > 0 && k % 16 == 0,
              "Gemm::linear (packed): bad shape rows=" + std::to_string(rows) + " k=" + std::to_string(k) +
                  " n=" + std::to_string(n));
  SPARK_CHECK(aligned16(x) && aligned16(y), "Gemm::linear: x and y must be 16-byte aligned");
  if (rows == 0) return;
  if (path == GemmPath::AUTO) path = rows <= kGemvMaxRows ? GemmPath::GEMV : GemmPath::CUBLASLT;
  // A chain of parts (kernel_args.h): each writes its own columns of y.
  const size_t out_size = out == GemmOut::F32 ? 4 : 2;
  int32_t n0 = 0;
  for (const DeviceMatrix* part = &w; part; part = part->tail) {
    const int32_t pn = part->rows > 0 ? part->rows : n - n0;
    SPARK_CHECK(pn > 0 && n0 + pn <= n && (part->tail == nullptr) == (n0 + pn == n),
                "Gemm::linear: the parts of a packed matrix do not add up to its rows");
    SPARK_CHECK(part->format != WeightFormat::HALF, "Gemm::linear: a chained part must be packed");
    void* py = static_cast<char*>(y) + size_t(n0) * out_size;
    if (path == GemmPath::GEMV) {
      if (part->format == WeightFormat::Q8_0)
        gemv_q8_0(type, x, rows, k, *part, pn, py, n, out, stream, programmatic);
      else if (part->format == WeightFormat::FP8)
        gemv_fp8(type, x, rows, k, *part, pn, py, n, out, stream, programmatic);
      else if (part->format == WeightFormat::NVFP4)
        gemv_nvfp4(type, x, rows, k, *part, pn, py, n, out, stream, programmatic);
      else
        gemv_blocks(part->format, type, x, rows, k, part->data, pn, py, n, out, stream, programmatic);
    } else {
      DeviceMatrix segment = *part;
      segment.tail = nullptr;
      packed_gemm(type, x, rows, k, segment, pn, py, n, out, PackedScratch{workspace_, kWorkspaceBytes, sms_}, stream,
                  programmatic);
    }
    n0 += pn;
  }
}

}  // namespace spark::cuda
