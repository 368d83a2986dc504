// attention_kernels.h — launchers and shared planning rules of the attention kernels;
// included only by attention.cu, attention_prefill.cu and attention_decode.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "engine/backend/cuda/common.cuh"
#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda::attn {

// Prefill: query rows per CTA, one warp a 16-row block of mma.m16n8k16: 64 (4 warps), or
// 32 (2 warps) at head_dim 512, where a 64-row Q tile would take 64 KB of shared memory and
// with the K and V tiles overrun GB10's 99 KB (attention_prefill.cu).
__host__ __device__ constexpr int prefill_rows(int head_dim) { return head_dim > 256 ? 32 : 64; }
__host__ __device__ constexpr int prefill_threads(int head_dim) { return prefill_rows(head_dim) / 16 * 32; }
// Value columns one prefill CTA accumulates: the whole head up to 256; at 512 two CTAs
// take half each (the grid's x is heads x head_dim / this), each computing the whole S.
__host__ __device__ constexpr int prefill_value_cols(int head_dim) { return head_dim > 256 ? 256 : head_dim; }

// Decode split-K: a partition takes at least kMinPartition tokens; a sequence is cut in
// at most parts_cap partitions, parts_cap chosen per launch so that the grid holds about
// kTargetCtas working CTAs (enough to fill every SM several times at batch 1, few
// partial results at large batch). kMaxPartitions bounds the workspace and the grid.
inline constexpr int kDecodeThreads = 128;
inline constexpr int kMinPartition = 128;
inline constexpr int kMaxPartitions = 64;
inline constexpr int kTargetCtas = 2048;
// q heads one decode CTA serves; larger GQA groups are cut into chunks of this size. At
// head_dim 512 four: a head's q and accumulator take 32 registers a lane (twice 256's), and
// the warps' partial sums s_red, 4 warps x heads x 512 x 4 bytes, stay at 32 KB of the 48 KB.
inline constexpr int kDecodeMaxGroup = 8;
constexpr int decode_max_group(int head_dim) { return head_dim > 256 ? 4 : kDecodeMaxGroup; }

// The cache formats a compute type T reads: T itself, or e4m3 bytes with scales (any T).
// Kernels are templated on (T, cache element type); only these pairs are instantiated.
struct Fp8Kv {};  // tag: e4m3 values, one power-of-two scale byte per (slot, kv head)

inline bool valid_kv_for(HalfType compute, KvDtype kv) {
  return kv == KvDtype::FP8 || (kv == KvDtype::F16) == (compute == HalfType::F16);
}

struct PrefillTile {
  int32_t seq;   // sequence index in the batch
  int32_t row0;  // first query row of the tile, counted from the sequence's first row
};

inline int decode_head_chunks(int group, int head_dim) {
  const int max_group = decode_max_group(head_dim);
  return (group + max_group - 1) / max_group;
}

// Partitions per sequence a decode launch over num_decode sequences uses (the grid's z).
inline int decode_parts_cap(int num_decode, int num_kv_heads, int head_chunks, int max_parts) {
  const int64_t ctas = int64_t(std::max(num_decode, 1)) * num_kv_heads * head_chunks;
  const int64_t want = (kTargetCtas + ctas - 1) / ctas;
  return int(std::clamp<int64_t>(want, 1, max_parts));
}

struct DecodeSplit {
  int32_t len;    // tokens per partition (the last may be shorter)
  int32_t parts;  // partitions that hold tokens; 0 for an empty context
};

// The same rule in the split kernel and the combine kernel: both derive a sequence's
// partitions from its context length alone, so nothing per sequence is uploaded.
__host__ __device__ inline DecodeSplit decode_split(int32_t ctx, int32_t parts_cap) {
  if (ctx <= 0) return {0, 0};
  int32_t parts = (ctx + kMinPartition - 1) / kMinPartition;
  parts = parts < parts_cap ? parts : parts_cap;
  int32_t len = (ctx + parts - 1) / parts;
  len = (len + 63) / 64 * 64;
  return {len, (ctx + len - 1) / len};
}

// What both kernels read: the step's rows, the paged cache and the head shape.
struct StepParams {
  const void* q = nullptr;  // [T, num_heads * head_dim] of the compute type
  void* out = nullptr;      // the same shape and type as q
  KvLayer cache;
  const int32_t* query_start = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int32_t max_blocks_per_seq = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size_log2 = 0;
  float scale_log2 = 0;  // softmax scale * log2(e)
  int32_t window = 0;             // > 0: a row sees its last `window` tokens only (AttentionExtras)
  const float* sinks = nullptr;   // [num_heads] sink logits, or null
  // false: each row sees its sequence's whole context (AttentionExtras). Only the prefill
  // kernel reads it: a decode row is its sequence's last, which sees the whole context either way.
  bool causal = true;
};

// The first token a row that sees `visible` tokens of its sequence attends to.
__host__ __device__ inline int32_t window_start(int32_t visible, int32_t window) {
  return window > 0 && visible > window ? visible - window : 0;
}

#ifdef __CUDACC__
// The cache block holding token `tok` of a sequence whose block-table row is `table`.
// A sliding-window layer holds the window blocks only (KvLayer::num_blocks), and the
// kernels never reach a block behind a row's window, which the block manager may have
// moved to an id this layer has no storage for; the emulator checks that they do not.
__device__ __forceinline__ int64_t cache_block(const int32_t* table, int tok, int block_size_log2,
                                               const KvLayer& cache) {
  const int32_t block = __ldg(table + (tok >> block_size_log2));
#if SPARK_CUDA_EMU
  if (cache.num_blocks > 0 && (block < 0 || block >= cache.num_blocks))
    ::emu::device_error("attention reads block %d of token %d; the layer holds blocks [0, %lld)", int(block), tok,
                        static_cast<long long>(cache.num_blocks));
#endif
  return block;
}

// The factor that turns a row's unnormalised output into the softmax's: 1 / l, or with a
// sink logit s (natural units) 1 / (l + e^(s - m)), in the log2 domain of m (the running
// max) and l (the sum of exp2(logit - m)), rescaled to max(m, s) so nothing overflows.
__device__ __forceinline__ float softmax_normaliser(float m, float l, const float* sinks, int head) {
  if (!sinks) return 1.0f / l;
  const float s = sinks[head] * 1.4426950408889634f;
  const float top = fmaxf(m, s);
  const float f = exp2f(m - top);
  return f / (l * f + exp2f(s - top));
}
#endif

struct DecodeParams : StepParams {
  const int32_t* seq_list = nullptr;  // decode slot -> sequence; null: slot i is sequence i
  int32_t num_decode = 0;             // grid x
  int32_t head_chunks = 0;
  int32_t parts_cap = 0;  // grid z; also the stride of the partial results
  // Partial results of partition p of head h of decode slot i at (i * num_heads + h) * parts_cap + p.
  float* part_m = nullptr;    // running max (log2 domain)
  float* part_l = nullptr;    // sum of exp2(logit - max)
  float* part_acc = nullptr;  // [.., head_dim] unnormalised output
};

// programmatic: launched as programmatic dependent launches (sm_90 and later only).
void launch_decode(const DecodeParams& p, HalfType compute, KvDtype dtype, cudaStream_t stream, bool programmatic);

struct PrefillParams : StepParams {
  const PrefillTile* tiles = nullptr;
  int32_t num_tiles = 0;
};

// Dynamic shared memory of the prefill kernel for this head size (the same for every
// compute type and cache format: FP8 tiles are widened to the compute type in shared memory).
size_t prefill_smem_bytes(int head_dim);
// Once per process and shape, before the first launch: raises the kernel's shared memory
// limit; throws RuntimeError when the device cannot give that much.
void prefill_setup(int head_dim, HalfType compute, KvDtype dtype);
void launch_prefill(const PrefillParams& p, HalfType compute, KvDtype dtype, cudaStream_t stream);

#ifdef __CUDACC__
// Eight values as f32: bf16 or f16 (T) from a 16-byte load, e4m3 from an 8-byte one.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& w, float (&f)[8]);

// bf16 is the high half of an f32: widening is a shift or a mask.
template <>
__device__ __forceinline__ void unpack8<bf16>(const uint4& w, float (&f)[8]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(u[i] << 16);
    f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

template <>
__device__ __forceinline__ void unpack8<f16>(const uint4& w, float (&f)[8]) {
  const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(__half2(__half2_raw{uint16_t(u[i]), uint16_t(u[i] >> 16)}));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

__device__ __forceinline__ void unpack8(const uint2& w, float (&f)[8]) {
  const uint32_t u[2] = {w.x, w.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(u[i] >> (16 * j)), __NV_E4M3);
      const float2 v = __half22float2(__half2(h));
      f[4 * i + 2 * j] = v.x;
      f[4 * i + 2 * j + 1] = v.y;
    }
  }
}
#endif

}  // namespace spark::cuda::attn
