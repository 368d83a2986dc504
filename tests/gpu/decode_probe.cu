// decode_probe.cu — what one weight costs each decode reader (weight_readers.cuh), for
// kernel_report.py: decode_probe<R, N> loads and decodes N chunks of a row as the MoE decode
// GEMVs do (moe_gemv.cu): decode_folded, one FMA a weight, into the row's accumulator, or
// for a reader that leaves a factor to each chunk (FoldsFactor: MXFP4's scale) into the
// chunk's own sum, which one more FMA multiplies by the factor into the accumulator. Compiled apart (never linked), so that the difference between the N = 2
// and N = 1 kernels' SASS is one chunk's loads, decode and FMAs: instructions a weight =
// that difference / the chunk's values - 1.
#include "engine/backend/cuda/weight_readers.cuh"

namespace spark::cuda {

template <typename R, int N>
__global__ void decode_probe(R w, float* out) {
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = (int(threadIdx.x) * N + i) * R::kValues;
    float v[R::kValues];
    const float factor = decode_folded(w, w.load(blockIdx.x, c), blockIdx.x, c, v);
    float dot = FoldsFactor<R> ? 0.0f : acc;
#pragma unroll
    for (int j = 0; j < R::kValues; ++j) dot = fmaf(v[j], v[j], dot);
    acc = FoldsFactor<R> ? fmaf(dot, factor, acc) : dot;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

#define SPARK_DECODE_PROBE(R)                                \
  template __global__ void decode_probe<R, 1>(R, float*); \
  template __global__ void decode_probe<R, 2>(R, float*)

SPARK_DECODE_PROBE(Q8_0Rows);
SPARK_DECODE_PROBE(Fp8Rows);
SPARK_DECODE_PROBE(Mxfp4Rows);
SPARK_DECODE_PROBE(Nvfp4Rows);
SPARK_DECODE_PROBE(BlockRows<WeightFormat::Q4_0>);
SPARK_DECODE_PROBE(BlockRows<WeightFormat::Q4_K>);
SPARK_DECODE_PROBE(BlockRows<WeightFormat::Q5_K>);
SPARK_DECODE_PROBE(BlockRows<WeightFormat::Q6_K>);
SPARK_DECODE_PROBE(BlockRows<WeightFormat::Q5_0>);
SPARK_DECODE_PROBE(BlockRows<WeightFormat::Q5_1>);

}  // namespace spark::cuda
