// cublaslt.cpp — emulated cuBLASLt matmul: D = alpha * op(A) * op(B) + beta * C with
// column-major layouts exactly as cuBLASLt defines them, f32 accumulation, bf16, f16
// or f32 matrices. Work is queued on the stream like a kernel (so graph capture records it).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "cublasLt.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

struct cublasLtContext {
  int dummy = 0;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
};

namespace emu {
// Queues `op` on `stream` as cudaMemsetAsync would (capture-aware); defined in runtime.cpp's terms.
cudaError_t submit_host_work(cudaStream_t stream, const char* what, std::function<void()> op);
}  // namespace emu

namespace {

float load(const void* base, cudaDataType_t type, int64_t i) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  if (type == CUDA_R_16F) return __half2float(static_cast<const __half*>(base)[i]);
  return static_cast<const float*>(base)[i];
}
void store(void* base, cudaDataType_t type, int64_t i, float v) {
  if (type == CUDA_R_16BF)
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(v);
  else if (type == CUDA_R_16F)
    static_cast<__half*>(base)[i] = __float2half(v);
  else
    static_cast<float*>(base)[i] = v;
}
bool supported(cudaDataType_t t) { return t == CUDA_R_16BF || t == CUDA_R_16F || t == CUDA_R_32F; }

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasLtGetStatusString(cublasStatus_t s) { return cublasLtGetStatusName(s); }

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA || attr == CUBLASLT_MATMUL_DESC_TRANSB) {
    if (size != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(attr == CUBLASLT_MATMUL_DESC_TRANSA ? &desc->trans_a : &desc->trans_b, buf, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  // cuBLASLt: column-major, ld >= rows.
  if (!supported(type) || ld < int64_t(rows)) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&pref->max_workspace, buf, size);
  } else if (size != sizeof(uint32_t)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

namespace {
// Shapes agree: op(A) is m x k, op(B) k x n, C and D m x n.
bool shapes_ok(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
               cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
  const uint64_t m = desc->trans_a == CUBLAS_OP_N ? a->rows : a->cols;
  const uint64_t ka = desc->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t kb = desc->trans_b == CUBLAS_OP_N ? b->rows : b->cols;
  const uint64_t n = desc->trans_b == CUBLAS_OP_N ? b->cols : b->rows;
  return ka == kb && c->rows == m && c->cols == n && d->rows == m && d->cols == n;
}
}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t,
                                              int requested, cublasLtMatmulHeuristicResult_t* results, int* found) {
  *found = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (!shapes_ok(desc, a, b, c, d)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t al, const void* b, cublasLtMatrixLayout_t bl, const void* beta,
                              const void* c, cublasLtMatrixLayout_t cl, void* d, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) {
  if (!shapes_ok(desc, al, bl, cl, dl)) return CUBLAS_STATUS_INVALID_VALUE;
  if (desc->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float alpha_v = *static_cast<const float*>(alpha), beta_v = *static_cast<const float*>(beta);
  const auto A = *al, B = *bl, C = *cl, D = *dl;
  const cublasOperation_t ta = desc->trans_a, tb = desc->trans_b;
  auto run = [=]() {
    const int64_t m = int64_t(D.rows), n = int64_t(D.cols);
    const int64_t k = int64_t(ta == CUBLAS_OP_N ? A.cols : A.rows);
    // Blocks of op(A)'s rows and op(B)'s columns are first converted to f32 with k
    // contiguous, so the inner loop is a plain dot product: the check programs' largest
    // shapes spend most of their emulated time here.
    constexpr int64_t kBlock = 64;
    std::vector<float> arows(size_t(kBlock * k)), bcols(size_t(kBlock * k));
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
      const int64_t nj = std::min(kBlock, n - j0);
      // op(B)(p, j): B(p, j) when N, B(j, p) when T; element (r, c) of a layout is at r + c * ld.
      for (int64_t j = 0; j < nj; ++j)
        for (int64_t p = 0; p < k; ++p)
          bcols[size_t(j * k + p)] = load(b, B.type, tb == CUBLAS_OP_N ? p + (j0 + j) * B.ld : (j0 + j) + p * B.ld);
      for (int64_t i0 = 0; i0 < m; i0 += kBlock) {
        const int64_t ni = std::min(kBlock, m - i0);
        for (int64_t i = 0; i < ni; ++i)
          for (int64_t p = 0; p < k; ++p)
            arows[size_t(i * k + p)] = load(a, A.type, ta == CUBLAS_OP_N ? (i0 + i) + p * A.ld : p + (i0 + i) * A.ld);
        for (int64_t j = 0; j < nj; ++j) {
          const float* bc = bcols.data() + j * k;
          for (int64_t i = 0; i < ni; ++i) {
            const float* ar = arows.data() + i * k;
            // Four partial sums in double: products of 16-bit values are exact in double,
            // and the order of a sum in double does not show at f32 precision.
            double acc[4] = {0, 0, 0, 0};
            int64_t p = 0;
            for (; p + 4 <= k; p += 4)
              for (int q = 0; q < 4; ++q) acc[q] += double(ar[p + q]) * double(bc[p + q]);
            for (; p < k; ++p) acc[0] += double(ar[p]) * double(bc[p]);
            float v = alpha_v * float((acc[0] + acc[1]) + (acc[2] + acc[3]));
            const int64_t row = i0 + i, col = j0 + j;
            if (beta_v != 0.0f) v += beta_v * load(c, C.type, row + col * C.ld);
            store(d, D.type, row + col * D.ld, v);
          }
        }
      }
    }
  };
  return emu::submit_host_work(stream, "cublasLtMatmul", run) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                              : CUBLAS_STATUS_EXECUTION_FAILED;
}
