// rms_norm.cu — the fused residual add + RMSNorm, an encoder's residual add + LayerNorm, and
// the final norm of selected rows. Each reads a row of x (and delta) once into registers and
// writes its outputs once: per row 4H (+4H delta) bytes read, 2H written (+4H x); memory-bound.
//
// The add may take the MoE block's weighted sum in place of a delta (WeightedRows): the
// norm after a plain MoE layer reads the k grouped expert rows of its token (4kH bytes,
// what moe_combine read) and sums them in moe_combine's order, so combine_kernel, its
// launch and its dependency boundary (~1.5-2 us at decode) and its [rows, H] f32 output
// (4H bytes written, 4H read again here) leave the decode chain; the variant re-reads its
// own x row for the scaling (4H from L1/L2) instead of holding it in registers.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"
#include "engine/backend/cuda/rms_norm.h"

namespace spark::cuda {
namespace {

// Chunks of 8 values each thread keeps in registers between the sum of squares and the
// scaling, so x is read from memory once. 4 chunks * 256 threads covers hidden 8192 and
// 4 * 1024 the largest row we accept.
constexpr int kChunksPerThread = 4;
constexpr int kMaxHidden = 8 * kChunksPerThread * 1024;

// One CTA per row; thread i owns chunks i, i + blockDim, ... (coalesced 16-byte accesses).
// Row r reads x row row_ids[r] (r itself when row_ids is null) and writes out row r, which
// starts out_stride values after row r - 1's.
// x is written only when delta is not null; rms_norm_rows passes a const x that way.
// kWeighted (WeightedRows): the delta is a weighted sum of `terms` rows of delta; the row's
// terms go through shared memory once, then each chunk sums its 8 columns of them. That
// variant does not keep the row in registers (the sum's 16 live values would spill them):
// it writes x + delta back and reads it again for the scaling, 4H bytes through L1 and L2.
template <typename T, bool kWeighted = false>
__global__ void __launch_bounds__(1024)
    add_rms_norm_kernel(float* __restrict__ x, const int32_t* __restrict__ row_ids, const float* __restrict__ delta,
                        const int32_t* __restrict__ term_rows, const float* __restrict__ term_weights, int terms,
                        const float* __restrict__ weight, int32_t hidden, float eps, T* __restrict__ out,
                        int64_t out_stride) {
  __shared__ float scratch[32];
  __shared__ int32_t term_row[kWeighted ? 32 : 1];
  __shared__ float term_weight[kWeighted ? 32 : 1];
  wait_then_allow_next_kernel();
  const int64_t r = blockIdx.x;
  const int64_t src = row_ids ? int64_t(row_ids[r]) : r;
  float* xr = x + src * hidden;
  const int chunks = hidden / 8;
  if constexpr (kWeighted) {
    if (int(threadIdx.x) < terms) {
      term_row[threadIdx.x] = term_rows[r * terms + threadIdx.x];
      term_weight[threadIdx.x] = term_weights[r * terms + threadIdx.x];
    }
    __syncthreads();
    float sum_sq = 0.0f;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
      // moe_combine's sum: fmaf onto 0 in the order of the terms, then added to x.
      float d[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      for (int j = 0; j < terms; ++j) {
        const float p = term_weight[j];
        float y[8];
        load8(delta + int64_t(term_row[j]) * hidden + c * 8, y);
#pragma unroll
        for (int i = 0; i < 8; ++i) d[i] = fmaf(p, y[i], d[i]);
      }
      float v[8];
      load8(xr + c * 8, v);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        v[i] += d[i];
        sum_sq += v[i] * v[i];
      }
      store8(xr + c * 8, v);
    }
    if (!out) return;  // uniform over the block: nobody reaches block_sum
    const float inv = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(hidden) + eps);
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
      float v[8], w[8], o[8];
      load8(xr + c * 8, v);
      load8(weight + c * 8, w);
#pragma unroll
      for (int i = 0; i < 8; ++i) o[i] = w[i] * (v[i] * inv);  // the CPU's order: weight * (x * inv)
      store8(out + r * out_stride + c * 8, o);
    }
    return;
  }

  float v[kChunksPerThread][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= chunks) break;
    const float4* xp = reinterpret_cast<const float4*>(xr + c * 8);
    const float4 lo = xp[0], hi = xp[1];
    v[k][0] = lo.x, v[k][1] = lo.y, v[k][2] = lo.z, v[k][3] = lo.w;
    v[k][4] = hi.x, v[k][5] = hi.y, v[k][6] = hi.z, v[k][7] = hi.w;
    if (delta) {
      const float4* dp = reinterpret_cast<const float4*>(delta + r * hidden + c * 8);
      const float4 dlo = dp[0], dhi = dp[1];
      v[k][0] += dlo.x, v[k][1] += dlo.y, v[k][2] += dlo.z, v[k][3] += dlo.w;
      v[k][4] += dhi.x, v[k][5] += dhi.y, v[k][6] += dhi.z, v[k][7] += dhi.w;
      float4* xw = reinterpret_cast<float4*>(xr + c * 8);
      xw[0] = make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
      xw[1] = make_float4(v[k][4], v[k][5], v[k][6], v[k][7]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) sum_sq += v[k][j] * v[k][j];
  }
  if (!out) return;  // uniform over the block: nobody reaches block_sum

  const float total = block_sum(sum_sq, scratch);
  const float inv = 1.0f / sqrtf(total / float(hidden) + eps);
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= chunks) break;
    const float4* wp = reinterpret_cast<const float4*>(weight + c * 8);
    const float4 wlo = wp[0], whi = wp[1];
    const float w[8] = {wlo.x, wlo.y, wlo.z, wlo.w, whi.x, whi.y, whi.z, whi.w};
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = w[j] * (v[k][j] * inv);  // the CPU's order: weight * (x * inv)
    store8(out + r * out_stride + c * 8, o);
  }
}

// The encoder's post-norm (add_layer_norm in rms_norm.h): as add_rms_norm_kernel, one CTA a
// row with the row in registers, but two reductions (the sum, then the squares of the centred
// values) and the LayerNorm written back to x as well as to out.
template <typename T>
__global__ void __launch_bounds__(1024)
    add_layer_norm_kernel(float* __restrict__ x, const float* __restrict__ delta, const float* __restrict__ delta_bias,
                          const float* __restrict__ weight, const float* __restrict__ bias, int32_t hidden, float eps,
                          T* __restrict__ out) {
  __shared__ float scratch[32];
  wait_then_allow_next_kernel();
  const int64_t r = blockIdx.x;
  float* xr = x + r * hidden;
  const int chunks = hidden / 8;

  float v[kChunksPerThread][8];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= chunks) break;
    load8(xr + c * 8, v[k]);
    float d[8] = {};
    if (delta) load8(delta + r * hidden + c * 8, d);
    if (delta_bias) {
      float b[8];
      load8(delta_bias + c * 8, b);
#pragma unroll
      for (int j = 0; j < 8; ++j) d[j] += b[j];  // the CPU's order: x + (delta + bias)
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[k][j] += d[j];
      sum += v[k][j];
    }
  }
  const float mean = block_sum(sum, scratch) / float(hidden);
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= chunks) break;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[k][j] -= mean;
      sum_sq += v[k][j] * v[k][j];
    }
  }
  const float inv = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(hidden) + eps);
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= chunks) break;
    float w[8], b[8], o[8];
    load8(weight + c * 8, w);
    load8(bias + c * 8, b);
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = w[j] * (v[k][j] * inv) + b[j];
    store8(xr + c * 8, o);
    store8(out + r * hidden + c * 8, o);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Threads for a row of `hidden` values: each keeps up to kChunksPerThread chunks of 8.
int threads_for(int32_t hidden) { return int(ceil_div(ceil_div(hidden / 8, kChunksPerThread), 32) * 32); }

// sum.terms > 0: the delta is that weighted sum of sum.rows (delta unused).
template <typename T>
void launch(float* x, const int32_t* row_ids, const float* delta, const float* weight, int32_t rows, int32_t hidden,
            float eps, T* out, int64_t out_stride, cudaStream_t stream, bool programmatic,
            const WeightedRows& sum = {}) {
  if (sum.terms > 0) {
    SPARK_CHECK(sum.terms <= 32 && sum.rows && sum.row_of && sum.weights,
                "add_rms_norm: a weighted sum takes 1..32 terms, its rows, row indices and weights");
    delta = sum.rows;
  }
  SPARK_CHECK(rows >= 0, "rms_norm: negative rows");
  SPARK_CHECK(hidden > 0 && hidden % 8 == 0 && hidden <= kMaxHidden,
              "rms_norm: hidden must be a positive multiple of 8, at most 32768");
  if (rows == 0 || (!delta && !out)) return;
  SPARK_CHECK(x && (!out || weight), "rms_norm: x or weight is null");
  SPARK_CHECK(aligned16(x) && aligned16(delta) && aligned16(weight) && aligned16(out) && out_stride % 8 == 0 &&
                  out_stride >= hidden,
              "rms_norm: pointers must be 16-byte aligned, and output rows a multiple of 8 values apart");
  auto* kernel = add_rms_norm_kernel<T>;
  if constexpr (!std::is_same_v<T, float>)  // no f32 output takes a weighted sum
    if (sum.terms > 0) kernel = add_rms_norm_kernel<T, true>;
  launch_kernel("add_rms_norm_kernel", programmatic, kernel, dim3(unsigned(rows)), dim3(unsigned(threads_for(hidden))),
                0, stream, x, row_ids, delta, sum.row_of, sum.weights, int(sum.terms), weight, hidden, eps, out,
                out_stride);
}

}  // namespace

template <typename T>
void add_rms_norm(float* x, const float* delta, const float* weight, int32_t rows, int32_t hidden, float eps, T* out,
                  cudaStream_t stream, bool programmatic) {
  launch<T>(x, nullptr, delta, weight, rows, hidden, eps, out, hidden, stream, programmatic);
}

template <typename T>
void add_rms_norm(float* x, const WeightedRows& delta, const float* weight, int32_t rows, int32_t hidden, float eps,
                  T* out, cudaStream_t stream, bool programmatic) {
  launch<T>(x, nullptr, nullptr, weight, rows, hidden, eps, out, hidden, stream, programmatic, delta);
}

template <typename T>
void add_layer_norm(float* x, const float* delta, const float* delta_bias, const float* weight, const float* bias,
                    int32_t rows, int32_t hidden, float eps, T* out, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(rows >= 0, "add_layer_norm: negative rows");
  SPARK_CHECK(hidden > 0 && hidden % 8 == 0 && hidden <= kMaxHidden,
              "add_layer_norm: hidden must be a positive multiple of 8, at most 32768");
  if (rows == 0) return;
  SPARK_CHECK(x && weight && bias && out, "add_layer_norm: x, weight, bias and out are required");
  SPARK_CHECK(aligned16(x) && aligned16(delta) && aligned16(delta_bias) && aligned16(weight) && aligned16(bias) &&
                  aligned16(out),
              "add_layer_norm: pointers must be 16-byte aligned");
  launch_kernel("add_layer_norm_kernel", programmatic, add_layer_norm_kernel<T>, dim3(unsigned(rows)),
                dim3(unsigned(threads_for(hidden))), 0, stream, x, delta, delta_bias, weight, bias, hidden, eps, out);
}

template <typename T>
void rms_norm_rows(const float* x, const int32_t* row_ids, int32_t rows, const float* weight, int32_t hidden, float eps,
                   T* out, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(rows == 0 || (out && row_ids), "rms_norm_rows: out and row_ids are required");
  // The kernel writes x only when given a delta; none here, so the cast never writes.
  launch<T>(const_cast<float*>(x), row_ids, nullptr, weight, rows, hidden, eps, out, hidden, stream, programmatic);
}

template <typename T>
void rms_norm_strided(const float* x, int32_t rows, const float* weight, int32_t hidden, float eps, T* out,
                      int64_t out_stride, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(rows == 0 || out, "rms_norm_strided: out is required");
  launch<T>(const_cast<float*>(x), nullptr, nullptr, weight, rows, hidden, eps, out, out_stride, stream, programmatic);
}

template void add_rms_norm<bf16>(float*, const float*, const float*, int32_t, int32_t, float, bf16*, cudaStream_t,
                                 bool);
template void add_rms_norm<f16>(float*, const float*, const float*, int32_t, int32_t, float, f16*, cudaStream_t, bool);
template void add_rms_norm<bf16>(float*, const WeightedRows&, const float*, int32_t, int32_t, float, bf16*,
                                 cudaStream_t, bool);
template void add_rms_norm<f16>(float*, const WeightedRows&, const float*, int32_t, int32_t, float, f16*, cudaStream_t,
                                bool);
template void add_layer_norm<bf16>(float*, const float*, const float*, const float*, const float*, int32_t, int32_t,
                                   float, bf16*, cudaStream_t, bool);
template void add_layer_norm<f16>(float*, const float*, const float*, const float*, const float*, int32_t, int32_t,
                                  float, f16*, cudaStream_t, bool);
template void rms_norm_rows<bf16>(const float*, const int32_t*, int32_t, const float*, int32_t, float, bf16*,
                                  cudaStream_t, bool);
template void rms_norm_rows<f16>(const float*, const int32_t*, int32_t, const float*, int32_t, float, f16*,
                                 cudaStream_t, bool);
template void rms_norm_strided<bf16>(const float*, int32_t, const float*, int32_t, float, bf16*, int64_t, cudaStream_t,
                                     bool);
template void rms_norm_strided<f16>(const float*, int32_t, const float*, int32_t, float, f16*, int64_t, cudaStream_t,
                                    bool);
template void rms_norm_strided<float>(const float*, int32_t, const float*, int32_t, float, float*, int64_t,
                                      cudaStream_t, bool);

}  // namespace spark::cuda
