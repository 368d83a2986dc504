// kv_block_copy.cu — copies of whole KV blocks between block ids, in the full-attention
// layers, for the blocks a sliding-window model's block manager moves behind a window.
//
// Where the copies run: as launches queued before the step (before its embedding gather,
// and so before the replay of a decode graph), not as a kernel inside the captured graph.
// Bytes: one pair copies, in every full-attention layer, K and V of one block:
// block_size x num_kv_heads x head_dim x 2 bytes each in BF16 (gpt-oss-20b, blocks of 16:
// 16 x 8 x 64 x 2 = 16 KiB), so 12 layers x 32 KiB = 384 KiB read and 384 KiB written
// (gpt-oss-120b, 18 full layers: 576 KiB; FP8 KV: half, plus 2 x 128 scale bytes a block
// and layer). A decode step moves a block of a sequence each time its window start
// crosses a block boundary, once in block_size steps: at batch 1, 15 steps in 16 copy
// nothing; 64 sequences move 4 blocks a step on average, 3 MiB of traffic, ~14 us at
// GB10's 218 GB/s (~1 us at H100's 3.35 TB/s), beside a step that reads several GB of
// weights (the 20b's attention, LM head and routed experts). A prefill chunk of 8192
// tokens after another moves up to 512 blocks: 384 MiB, ~1.8 ms on GB10, beside the
// chunk's ~60 TFLOP. In the graph, the copy node would run every step (a launch's
// latency, ~2 us, whatever the list holds), and its list would need a device buffer of
// fixed size for the worst step (every sequence moving every block of a max_model_len
// context at once, as after a long prefix hit: max_num_seqs x max_model_len / block_size
// pairs, 4 MiB at 64 x 131072 / 16) uploaded each step. Before the replay it costs a host
// launch on the steps that copy only, and the list travels in the launch's parameters
// (kMaxPairs pairs, 2 KiB, under the 4 KiB limit; longer lists take several launches).
// The copies must also land before the step writes any KV (a block moved out may be
// handed to this step's new tokens), which a launch queued ahead of the whole step gives
// in both paths.
//
// Launch: grid (pairs, layers, 2: K and V), 128 threads copying 16-byte words, 4 loads in
// flight each (8 KiB a CTA); the 4 pairs of a 20b decode step are 96 CTAs, 2 per SM on
// GB10's 48 SMs, under one wave of H100's 132. No FLOPs.
#include "engine/backend/cuda/kv_block_copy.h"

#include <algorithm>

#include "engine/backend/cuda/common.cuh"

namespace spark::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxPairs = 256;

// Up to kMaxPairs pairs, pair i copied by the CTAs of blockIdx.x == i.
struct CopyList {
  int32_t src[kMaxPairs];
  int32_t dst[kMaxPairs];
};

// Each layer's blocks in its own geometry (Gemma 4's full layers differ from each other
// model's one): a block of K (or V) is block_size x kv heads x head_dim values of
// value_bytes each, in whole 16-byte words; FP8 adds block_size x kv heads scale bytes.
__global__ void __launch_bounds__(kThreads)
    copy_kv_blocks_kernel(const KvLayer* layers, int32_t block_size, int32_t value_bytes, bool fp8, CopyList list) {
  const KvLayer& layer = layers[blockIdx.y];
  const int64_t block_words = int64_t(block_size) * layer.num_kv_heads * layer.head_dim * value_bytes / 16;
  const int64_t scale_bytes = fp8 ? int64_t(block_size) * layer.num_kv_heads : 0;
  const bool is_v = blockIdx.z == 1;
  const int64_t src = list.src[blockIdx.x], dst = list.dst[blockIdx.x];
  const uint4* from = static_cast<const uint4*>(is_v ? layer.v : layer.k) + src * block_words;
  uint4* to = static_cast<uint4*>(is_v ? layer.v : layer.k) + dst * block_words;
  constexpr int kUnroll = 4;
  for (int64_t i0 = threadIdx.x; i0 < block_words; i0 += kThreads * kUnroll) {
    uint4 w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i0 + u * kThreads < block_words) w[u] = __ldg(from + i0 + u * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i0 + u * kThreads < block_words) to[i0 + u * kThreads] = w[u];
  }
  if (scale_bytes > 0) {
    uint8_t* scales = is_v ? layer.v_scale : layer.k_scale;
    for (int64_t i = threadIdx.x; i < scale_bytes; i += kThreads)
      scales[dst * scale_bytes + i] = scales[src * scale_bytes + i];
  }
}

}  // namespace

void copy_kv_blocks(const std::vector<int32_t>& pairs, const KvLayer* layers, int32_t num_layers, const KvShape& shape,
                    cudaStream_t stream) {
  SPARK_CHECK(pairs.size() % 2 == 0, "copy_kv_blocks: (source, destination) pairs");
  if (pairs.empty() || num_layers == 0) return;
  const bool fp8 = shape.dtype == KvDtype::FP8;
  // Whole 16-byte words: head_dim is a multiple of 16 on this backend's attention.
  const size_t n = pairs.size() / 2;
  for (size_t first = 0; first < n; first += kMaxPairs) {
    CopyList list;
    const auto count = uint32_t(std::min<size_t>(kMaxPairs, n - first));
    for (uint32_t i = 0; i < count; ++i) {
      list.src[i] = pairs[2 * (first + size_t(i))];
      list.dst[i] = pairs[2 * (first + size_t(i)) + 1];
    }
    copy_kv_blocks_kernel<<<dim3(count, uint32_t(num_layers), 2), kThreads, 0, stream>>>(
        layers, shape.block_size, fp8 ? 1 : 2, fp8, list);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace spark::cuda
