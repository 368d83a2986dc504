// assistant.cu — Gemma 4's assistant's stages around its layers (assistant.h).
#include "engine/backend/cuda/assistant.h"

#include <climits>

#include "engine/backend/cuda/boundary.h"
#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/embedding.h"
#include "engine/backend/cuda/f32_scale.h"

namespace spark::cuda {
namespace {

constexpr int kMaskThreads = 256;

// Whether cluster i of score v ranks before cluster bi of score bv (INT_MAX: none yet).
__device__ __forceinline__ bool ranks_before(float v, int i, float bv, int bi) {
  return i != INT_MAX && (bi == INT_MAX || v > bv || (v == bv && i < bi));
}

// A block a row: top_k rounds of a block-wide argmax over the clusters not chosen yet, then
// the least logit of the chosen clusters' tokens, then every other token set below it.
__global__ void __launch_bounds__(kMaskThreads)
    best_clusters_kernel(float* __restrict__ logits, const float* __restrict__ scores,
                         const int32_t* __restrict__ token_cluster, int32_t vocab, int32_t clusters, int32_t top_k) {
  extern __shared__ uint8_t chosen[];  // [clusters]
  __shared__ float warp_score[32];
  __shared__ int warp_index[32];
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* s = scores + int64_t(blockIdx.x) * clusters;
  float* out = logits + int64_t(blockIdx.x) * vocab;
  for (int c = threadIdx.x; c < clusters; c += blockDim.x) chosen[c] = 0;
  __syncthreads();
  for (int k = 0; k < top_k; ++k) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int c = threadIdx.x; c < clusters; c += blockDim.x)
      if (!chosen[c] && ranks_before(s[c], c, bv, bi)) {
        bv = s[c];
        bi = c;
      }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_down_sync(0xffffffffu, bv, o);
      const int oi = __shfl_down_sync(0xffffffffu, bi, o);
      if (ranks_before(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      warp_score[warp] = bv;
      warp_index[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < int(blockDim.x >> 5); ++w)
        if (ranks_before(warp_score[w], warp_index[w], bv, bi)) {
          bv = warp_score[w];
          bi = warp_index[w];
        }
      if (bi != INT_MAX) chosen[bi] = 1;
    }
    __syncthreads();
  }
  float low = INFINITY;
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    if (chosen[token_cluster[v]]) low = fminf(low, out[v]);
  low = -block_max(-low, scratch);
  for (int v = threadIdx.x; v < vocab; v += blockDim.x)
    if (!chosen[token_cluster[v]]) out[v] = low - 1.0f;
}

}  // namespace

void assistant_input(Gemm& gemm, HalfType type, const AssistantInput& in, const int32_t* token_ids,
                     const float* hidden_in, int32_t hidden_rows, int32_t rows, float* scratch, void* pair, float* x,
                     cudaStream_t stream, bool programmatic) {
  SPARK_CHECK(in.model_embedding && in.assist_in, "assistant_input: the tables are not on the device");
  SPARK_CHECK(rows >= 0 && hidden_rows >= 0 && hidden_rows <= rows && (hidden_in || hidden_rows == 0),
              "assistant_input: bad hidden rows");
  SPARK_CHECK(in.model_width > 0 && in.model_width % 8 == 0, "assistant_input: W must be a positive multiple of 8");
  if (rows == 0) return;
  const int64_t W = in.model_width;
  const size_t row = size_t(W) * 4, pair_row = 2 * row;
  float* paired = scratch;                           // [rows, 2 W]
  float* embedded = scratch + int64_t(rows) * 2 * W;  // [rows, W]
  embedding_rows(type, *in.model_embedding, token_ids, rows, in.vocab, int32_t(W), embedded, stream);
  if (in.embed_scale != 1.0f) scale_f32(embedded, int64_t(rows) * W, in.embed_scale, stream);
  // Padding rows zeroed whole, then every row's embedding half and the real rows' hidden half.
  if (rows > hidden_rows)
    CUDA_CHECK(cudaMemsetAsync(paired + int64_t(hidden_rows) * 2 * W, 0, size_t(rows - hidden_rows) * pair_row, stream));
  CUDA_CHECK(cudaMemcpy2DAsync(paired, pair_row, embedded, row, row, size_t(rows), cudaMemcpyDeviceToDevice, stream));
  if (hidden_rows > 0)
    CUDA_CHECK(cudaMemcpy2DAsync(paired + W, pair_row, hidden_in, row, row, size_t(hidden_rows),
                                 cudaMemcpyHostToDevice, stream));
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    hidden_to_16bit<T>(paired, int64_t(rows) * 2 * W, static_cast<T*>(pair), stream);
  });
  gemm.linear(type, pair, rows, int32_t(2 * W), *in.assist_in, in.hidden, x, GemmOut::F32, stream, GemmPath::AUTO,
              programmatic);
}

void assistant_hidden_out(Gemm& gemm, HalfType type, const DeviceMatrix& assist_out, const float* h, int32_t rows,
                          int32_t hidden, int32_t model_width, void* half_rows, float* out, cudaStream_t stream) {
  if (rows == 0) return;
  with_half_type(type, [&](auto tag) {
    using T = decltype(tag);
    hidden_to_16bit<T>(h, int64_t(rows) * hidden, static_cast<T*>(half_rows), stream);
  });
  gemm.linear(type, half_rows, rows, hidden, assist_out, model_width, out, GemmOut::F32, stream);
}

std::vector<int32_t> token_clusters(const std::vector<int32_t>& ordering, int64_t clusters) {
  const auto vocab = int64_t(ordering.size());
  SPARK_CHECK(clusters > 0 && vocab % clusters == 0, "token_clusters: the clusters must split the vocabulary evenly");
  std::vector<int32_t> cluster(ordering.size());
  for (int64_t i = 0; i < vocab; ++i) cluster[size_t(ordering[size_t(i)])] = int32_t(i / (vocab / clusters));
  return cluster;
}

void mask_to_best_clusters(float* logits, const float* scores, const int32_t* token_cluster, int32_t rows,
                           int32_t vocab, int32_t clusters, int32_t top_k, cudaStream_t stream) {
  SPARK_CHECK(clusters > 0 && clusters <= kMaxClusters && top_k > 0 && top_k <= clusters && vocab > 0,
              "mask_to_best_clusters: bad sizes");
  if (rows == 0) return;
  launch_kernel("best_clusters_kernel", false, best_clusters_kernel, dim3(unsigned(rows)), dim3(kMaskThreads),
                size_t(clusters), stream, logits, scores, token_cluster, vocab, clusters, top_k);
}

}  // namespace spark::cuda
