// rope_kv.h — launcher for the attention input stage: bias, Qwen3 q/k norm, RoPE, and the
// write of K and V into the paged cache, fused in one pass over the qkv projection.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

struct RopeArgs {
  const float* inv_freq = nullptr;  // [rotary_dim / 2] in device memory (cpu::Rope's, llama3 scaling applied)
  float position_scale = 1.0f;      // linear scaling: angle = (position * position_scale) * inv_freq[i]
  float attention_scale = 1.0f;     // YaRN: cos and sin are multiplied by its attention factor
  int32_t rotary_dim = 0;           // values of each q/k head that rotate (even, <= head_dim); 0: all of them
  bool rotates = true;              // false: attention without RoPE (Nemotron-H), every value passes through
};

// Where a layer's values come from: their own v rows, or (Gemma 4's full layers, k_eq_v)
// the key rows as projected, before k_norm and RoPE; v_norm: then RMSNorm per head without
// a weight (Gemma 4).
struct ValueSource {
  bool from_keys = false;
  bool norm = false;
};

// qkv is the fused projection output, rows of T (the compute type, __nv_bfloat16 or __half)
// qkv_stride values apart: q heads, then k heads, then v heads, (num_heads + 2 * num_kv_heads)
// * head_dim values (no v heads with values.from_keys), and after them whatever else the
// projection carries (Qwen3.5's attention output gate), which is not read. qkv_stride 0:
// exactly the q, k and v heads.
// For each row t:
//   - adds bias ([(num_heads + 2 * num_kv_heads) * head_dim] f32) when bias is not null (Qwen2);
//   - applies the per-head RMSNorm with q_norm / k_norm ([head_dim] f32, eps) over the whole
//     head when not null (Qwen3, Qwen3.5), and to v without a weight with values.norm;
//   - rotates the first rotary_dim values of each q and k head by positions[t] (rotate_half
//     convention: pairs (i, i + rotary_dim/2) with inv_freq[i]); the rest pass through;
//   - writes q to q_out [rows, num_heads * head_dim] T;
//   - writes k and v to the cache at slot_mapping[t] (nothing when it is negative; and with
//     kv.num_slots 0, queries only: the rows hold no k or v heads, none is written, and
//     the cache may be empty, as Gemma 4's assistant reads another model's K and V). A 16-bit
//     cache holds T, so kv.dtype must be T's (BF16 for __nv_bfloat16, F16 for __half); FP8
//     caches get one power-of-two scale per (slot, kv head) from that head vector's
//     absolute maximum (fp8_scale_for in common.cuh).
// Arithmetic is f32 after reading the T inputs. programmatic: a programmatic dependent
// launch (launch_kernel in common.cuh; sm_90 and later only).
template <typename T>
void qkv_rope_kv_write(const T* qkv, const float* bias, const float* q_norm, const float* k_norm, float eps,
                       const int32_t* positions, const int32_t* slot_mapping, int32_t rows, int32_t num_heads,
                       int32_t qkv_stride, const RopeArgs& rope, const KvShape& kv, KvLayer cache, T* q_out,
                       cudaStream_t stream, bool programmatic = false, ValueSource values = {});

}  // namespace spark::cuda
