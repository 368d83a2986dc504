// matmul.h — y = x · Wᵀ over weight rows of any supported dtype, and row decoding.
#pragma once
#include <cstdint>
#include <initializer_list>

#include "engine/model/tensor.h"
#include "engine/util/thread_pool.h"

namespace spark::cpu {

// True when the CPU kernels can read weights of this dtype.
bool matmul_supports(DType t);

// Writes row `row` of the 2-D tensor `w` ([rows, cols]) as `cols` f32 values.
void decode_row(const Tensor& w, int64_t row, float* out);

// y[r, o] = sum_i x[r, i] * W[o, i] for r < rows, o < W.rows(), with x [rows, W.cols()]
// and y [rows, W.rows()], both contiguous f32. Multi-threaded over output rows; each
// weight row is read (and decoded) once per call whatever the number of activation rows.
void matmul(ThreadPool& pool, const float* x, int64_t rows, const Tensor& w, float* y);

// Several matmuls sharing the input x (q/k/v, gate/up) in one parallel loop, so a decode
// step waits on the thread pool once instead of once per weight.
struct MatmulOut {
  const Tensor* w;
  float* y;  // [rows, w->rows()]
};
void matmul_many(ThreadPool& pool, const float* x, int64_t rows, std::initializer_list<MatmulOut> outs);

// The same over output rows [out_begin, out_end) only, single-threaded, writing
// y[r * y_stride + o]; the building block of matmul, exposed for tests and fused callers.
void matmul_rows(const float* x, int64_t rows, const Tensor& w, int64_t out_begin, int64_t out_end,
                 float* y, int64_t y_stride);

}  // namespace spark::cpu
