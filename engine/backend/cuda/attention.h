// attention.h — causal (or an encoder's bidirectional) attention over the paged KV cache: a
// tiled tensor-core kernel for prefill rows (variable length, cached prefixes) and a split-K
// kernel over block tables for decode rows (one query per sequence, GQA heads of a kv head together).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

struct AttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // 16, 32, 64, 128, 256 or 512
  int32_t block_size = 0;
  // The type of q and out and of the prefill's tensor-core inputs. The cache is in this
  // type (kv_dtype BF16 with BF16, F16 with F16) or FP8 with either; the constructor
  // rejects other pairs.
  HalfType compute = HalfType::BF16;
  KvDtype kv_dtype = KvDtype::BF16;
  int32_t max_tokens = 0;          // rows of the largest step (max_num_batched_tokens)
  int32_t max_seqs = 0;            // sequences of the largest step
  int32_t max_blocks_per_seq = 0;  // block-table stride: blocks of one max_model_len sequence
  float scale = 0.0f;              // softmax scale, 1 / sqrt(head_dim)
};

// What one layer's attention adds to plain causal attention (gpt-oss, encoders); the
// defaults: nothing.
//   window > 0: each row sees only the last `window` tokens of its causal prefix, itself
//     included; cache blocks wholly before the first row's window are never read.
//   sinks: [num_heads] f32 logits, one a head, that join each row's softmax (scaled as
//     logits already are: not by `scale`) and add no value.
//   causal false: every row sees all context_lens[s] tokens of its sequence (encoders,
//     whose prompts run whole in one step); no window then.
struct AttentionExtras {
  int32_t window = 0;
  const float* sinks = nullptr;
  bool causal = true;
};

class Attention {
 public:
  // Allocates its device workspace (plan arrays, split-K partial results): exactly
  // workspace_bytes(shape), so the memory plan can count it.
  explicit Attention(const AttentionShape& shape);
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;
  static size_t workspace_bytes(const AttentionShape& shape);

  // Once per step, before run() for each layer: plans this step from the host batch
  // (which sequences are decode rows, the prefill tiles) and uploads what the kernels
  // need on `stream`. Returns true when every sequence has exactly one query row; such
  // steps depend on nothing prepare() uploads, so a CUDA graph captured for one
  // decode-only step replays correctly for any other with the same num_seqs.
  bool prepare(const Batch& batch, cudaStream_t stream);

  // out[t, h * head_dim ...] = softmax(q[t, h] · K_sᵀ · scale) · V_s over the causal
  // prefix of t's sequence s: row i of a sequence with n query rows sees its first
  // context_lens[s] - n + i + 1 tokens (all context_lens[s] when not extras.causal), read
  // through s's block table. q and out are
  // [num_tokens, num_heads * head_dim] of shape.compute (__nv_bfloat16 or __half); head h
  // reads kv head h / (num_heads / num_kv_heads). Sequences with context_lens 0 (graph
  // padding) give zeros. programmatic: the decode kernels as programmatic dependent
  // launches (launch_kernel in common.cuh; sm_90 and later only); prefill launches normally.
  // extras: the layer's sliding window and sinks (AttentionExtras).
  void run(const DeviceBatch& batch, KvLayer cache, const void* q, void* out, cudaStream_t stream,
           bool programmatic = false, const AttentionExtras& extras = {});

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace spark::cuda
