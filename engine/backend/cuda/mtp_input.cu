// mtp_input.cu — an MTP head's input stage (mtp_input.h): the two pre-fc RMSNorms into one
// [rows, 2H] buffer in a single launch, then the fc GEMM into the residual stream.
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/mtp_input.h"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {
namespace {

// As rms_norm.cu: each thread keeps up to 4 chunks of 8 values in registers between the
// sum of squares and the scaling (one read of the row); 1024 threads cover H = 32768.
constexpr int kChunksPerThread = 4;
constexpr int kMaxHidden = 8 * kChunksPerThread * 1024;

// Grid (rows, 2): CTA (r, 0) norms the embedded row x[r] into pair[r][0, H), CTA (r, 1) the
// hidden row hidden[r] into pair[r][H, 2H) (zeros when r >= hidden_rows). The CPU's order:
// weight * (v * inv).
template <typename T>
__global__ void __launch_bounds__(1024)
    mtp_input_norms_kernel(const float* __restrict__ x, const float* __restrict__ hidden, int32_t hidden_rows,
                           const float* __restrict__ embed_norm, const float* __restrict__ hidden_norm, int32_t H,
                           float eps, T* __restrict__ pair) {
  __shared__ float scratch[32];
  wait_then_allow_next_kernel();
  const int64_t r = blockIdx.x;
  const bool second = blockIdx.y == 1;
  T* out = pair + r * 2 * H + (second ? H : 0);
  const int chunks = H / 8;
  if (second && r >= hidden_rows) {  // padding: a zero hidden half (uniform over the block)
    const float zeros[8] = {};
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) store8(out + c * 8, zeros);
    return;
  }
  const float* src = (second ? hidden : x) + r * H;
  const float* weight = second ? hidden_norm : embed_norm;
  float v[kChunksPerThread][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= chunks) break;
    const float4* p = reinterpret_cast<const float4*>(src + c * 8);
    const float4 lo = p[0], hi = p[1];
    v[k][0] = lo.x, v[k][1] = lo.y, v[k][2] = lo.z, v[k][3] = lo.w;
    v[k][4] = hi.x, v[k][5] = hi.y, v[k][6] = hi.z, v[k][7] = hi.w;
#pragma unroll
    for (int j = 0; j < 8; ++j) sum_sq += v[k][j] * v[k][j];
  }
  const float inv = 1.0f / sqrtf(block_sum(sum_sq, scratch) / float(H) + eps);
#pragma unroll
  for (int k = 0; k < kChunksPerThread; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c >= chunks) break;
    const float4* wp = reinterpret_cast<const float4*>(weight + c * 8);
    const float4 wlo = wp[0], whi = wp[1];
    const float w[8] = {wlo.x, wlo.y, wlo.z, wlo.w, whi.x, whi.y, whi.z, whi.w};
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = w[j] * (v[k][j] * inv);
    store8(out + c * 8, o);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

template <typename T>
void mtp_input_norms(const float* x, const float* hidden, int32_t hidden_rows, int32_t rows, const float* embed_norm,
                     const float* hidden_norm, int32_t H, float eps, T* pair, cudaStream_t stream) {
  SPARK_CHECK(rows >= 0 && hidden_rows >= 0 && hidden_rows <= rows, "mtp_input_norms: bad row counts");
  SPARK_CHECK(H > 0 && H % 8 == 0 && H <= kMaxHidden,
              "mtp_input_norms: hidden must be a positive multiple of 8, at most 32768");
  if (rows == 0) return;
  SPARK_CHECK(x && pair && embed_norm && hidden_norm && (hidden || hidden_rows == 0), "mtp_input_norms: null pointer");
  SPARK_CHECK(aligned16(x) && aligned16(hidden) && aligned16(embed_norm) && aligned16(hidden_norm) && aligned16(pair),
              "mtp_input_norms: pointers must be 16-byte aligned");
  const int threads = int(ceil_div(ceil_div(H / 8, kChunksPerThread), 32) * 32);
  launch_kernel("mtp_input_norms_kernel", false, mtp_input_norms_kernel<T>, dim3(unsigned(rows), 2),
                dim3(unsigned(threads)), 0, stream, x, hidden, hidden_rows, embed_norm, hidden_norm, H, eps, pair);
}

void mtp_input(Gemm& gemm, HalfType type, const MtpInput& w, const float* hidden_in, int32_t hidden_rows, int32_t rows,
               float* x, float* scratch, void* pair, cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(w.fc && w.embed_norm && w.hidden_norm, "mtp_input: the head's fc or norms are not on the device");
  SPARK_CHECK(hidden_in || hidden_rows == 0, "mtp_input: no hidden rows");
  const int32_t H = w.hidden;
  if (hidden_rows > 0)
    CUDA_CHECK(
        cudaMemcpyAsync(scratch, hidden_in, size_t(hidden_rows) * size_t(H) * 4, cudaMemcpyHostToDevice, stream));
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    mtp_input_norms<T>(x, scratch, hidden_rows, rows, w.embed_norm, w.hidden_norm, H, w.eps, static_cast<T*>(pair),
                       stream);
  });
  gemm.linear(type, pair, rows, 2 * H, *w.fc, H, x, GemmOut::F32, stream, GemmPath::AUTO, programmatic);
}

template void mtp_input_norms<bf16>(const float*, const float*, int32_t, int32_t, const float*, const float*, int32_t,
                                    float, bf16*, cudaStream_t);
template void mtp_input_norms<f16>(const float*, const float*, int32_t, int32_t, const float*, const float*, int32_t,
                                   float, f16*, cudaStream_t);

}  // namespace spark::cuda
