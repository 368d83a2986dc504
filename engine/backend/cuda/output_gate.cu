// output_gate.cu — the sigmoid gates of output_gate.h: element-wise and memory-bound (the
// attention gate reads 2 and writes 1 value of T per output; the shared-expert gate reads 2
// f32 and writes 1), so one thread a 16-byte vector, flat over rows x width.
#include "engine/backend/cuda/output_gate.h"

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/ptx.cuh"

namespace spark::cuda {
namespace {

constexpr int kThreads = 256;

// The accurate expf, as the CPU reference: this is memory-bound either way. A very negative
// x gives expf(-x) = inf and a gate of exactly 0, not NaN.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Thread c takes values [col, col + V) of row t, chunks_per_row = width / V.
template <typename T, int V>
__global__ void output_gate_kernel(T* __restrict__ attn, const T* __restrict__ gate, int64_t gate_stride, int32_t width,
                                   int64_t total_chunks) {
  wait_then_allow_next_kernel();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= total_chunks) return;
  const int64_t chunks_per_row = width / V;
  const int64_t t = c / chunks_per_row, col = (c - t * chunks_per_row) * V;
  T* a = attn + t * width + col;
  const T* g = gate + t * gate_stride + col;
  if constexpr (V == 8) {
    float av[8], gv[8];
    load8(a, av);
    load8(g, gv);
#pragma unroll
    for (int k = 0; k < 8; ++k) av[k] *= sigmoid(gv[k]);
    store8(a, av);
  } else {
    *a = from_f32<T>(to_f32(*a) * sigmoid(to_f32(*g)));
  }
}

template <int V>
__global__ void gated_rows_kernel(float* __restrict__ out, const float* __restrict__ y, const float* __restrict__ logit,
                                  int64_t logit_stride, int32_t width, int64_t total_chunks) {
  wait_then_allow_next_kernel();
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= total_chunks) return;
  const int64_t chunks_per_row = width / V;
  const int64_t t = c / chunks_per_row, i = t * width + (c - t * chunks_per_row) * V;
  // Every thread of the row reads the same logit: one sector, served by L1 after the first.
  const float s = logit ? sigmoid(__ldg(logit + t * logit_stride)) : 1.0f;
  if constexpr (V == 4) {
    const float4 yv = *reinterpret_cast<const float4*>(y + i);
    float4 o = *reinterpret_cast<const float4*>(out + i);
    o.x += s * yv.x, o.y += s * yv.y, o.z += s * yv.z, o.w += s * yv.w;
    *reinterpret_cast<float4*>(out + i) = o;
  } else {
    out[i] += s * y[i];
  }
}

}  // namespace

template <typename T>
void apply_output_gate(T* attn, const T* gate, int32_t gate_stride, int32_t rows, int32_t width, cudaStream_t stream,
                       bool programmatic) {
  SPARK_CHECK(rows >= 0 && width > 0, "apply_output_gate: bad shape");
  SPARK_CHECK(gate_stride >= width, "apply_output_gate: gate_stride is shorter than a row");
  if (rows == 0) return;
  SPARK_CHECK(attn && gate, "apply_output_gate: null argument");
  // Every row of attn and of gate starts on a 16-byte boundary when the pointers do and
  // both row lengths are multiples of 8 values.
  const bool vec8 = width % 8 == 0 && gate_stride % 8 == 0 && aligned16(attn) && aligned16(gate);
  const int v = vec8 ? 8 : 1;
  const int64_t total_chunks = int64_t(rows) * (width / v);
  const dim3 grid(unsigned(ceil_div(total_chunks, kThreads)));
  launch_kernel("output_gate_kernel", programmatic, vec8 ? output_gate_kernel<T, 8> : output_gate_kernel<T, 1>, grid,
                dim3(kThreads), 0, stream, attn, gate, int64_t(gate_stride), width, total_chunks);
}

void add_gated_rows(float* out, const float* y, const float* logit, int32_t logit_stride, int32_t rows, int32_t width,
                    cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(rows >= 0 && width > 0, "add_gated_rows: bad shape");
  SPARK_CHECK(logit_stride >= 1, "add_gated_rows: logit_stride must be at least 1");
  if (rows == 0) return;
  SPARK_CHECK(out && y, "add_gated_rows: null argument");
  const bool vec4 = width % 4 == 0 && aligned16(out) && aligned16(y);
  const int v = vec4 ? 4 : 1;
  const int64_t total_chunks = int64_t(rows) * (width / v);
  const dim3 grid(unsigned(ceil_div(total_chunks, kThreads)));
  launch_kernel("gated_rows_kernel", programmatic, vec4 ? gated_rows_kernel<4> : gated_rows_kernel<1>, grid,
                dim3(kThreads), 0, stream, out, y, logit, int64_t(logit_stride), width, total_chunks);
}

template void apply_output_gate<bf16>(bf16*, const bf16*, int32_t, int32_t, int32_t, cudaStream_t, bool);
template void apply_output_gate<f16>(f16*, const f16*, int32_t, int32_t, int32_t, cudaStream_t, bool);

}  // namespace spark::cuda
