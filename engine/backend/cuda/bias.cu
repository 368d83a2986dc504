// bias.cu — the bias add of bias.h: one thread a value, memory-bound (rows x n x 8 bytes
// read and 4 written; a gpt-oss-20b decode step of 1 row: 2880 values, one wave).
#include "engine/backend/cuda/bias.h"

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int32_t n, int64_t total) {
  wait_then_allow_next_kernel();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) y[i] += __ldg(bias + i % n);
}

}  // namespace

void add_bias_f32(float* y, const float* bias, int32_t rows, int32_t n, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(rows >= 0 && n > 0, "add_bias_f32: bad shape");
  if (rows == 0) return;
  const int64_t total = int64_t(rows) * n;
  launch_kernel("add_bias_kernel", programmatic, add_bias_kernel, dim3(unsigned(ceil_div(total, kThreads))),
                dim3(kThreads), 0, stream, y, bias, n, total);
}

}  // namespace spark::cuda
