// kernel_args.h — the plain structs CUDA launchers take: one layer's paged KV cache and
// the step's batch in device memory. No CUDA headers, so host code can fill them.
#pragma once
#include <cstdint>

namespace spark::cuda {

// The 16-bit floating type a model computes in: weights, GEMM inputs and outputs,
// activations between kernels (the residual stream stays f32). BF16 for BF16 checkpoints;
// FP16 for FP16 checkpoints and for weights converted at load (GGUF blocks, F32), whose
// values FP16's 3 more significand bits keep closer.
enum class HalfType : uint8_t { BF16, F16 };

// How the device holds a weight matrix [n, k] (n output rows of k inputs).
//   HALF: `data` is [n, k] of the compute type.
//   Q8_0: GGUF's Q8_0 blocks (engine/model/quant.h) repacked so that loads coalesce:
//         `data` is [n, k] int8 quants (row r's k bytes contiguous, 16-byte aligned as
//         k % 32 == 0), `scales` [n, k / 32] IEEE half block scales; value (r, c) is
//         data[r * k + c] * scales[r * k / 32 + c / 32]. k * 34 / 32 bytes a row, as in
//         the file.
//   Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: `data` holds the file's blocks as they are, row after
//         row (row r at r * block_row_bytes(format, k), block_formats.h); read by the
//         block readers of block_readers.cuh. No `scales`.
//   FP8: an FP8 checkpoint's e4m3 weights (engine/model/fp8_weights.h): `data` is [n, k]
//         e4m3 bytes as the file stores them, `scales` the f32 scale grid
//         [ceil(n / scale_block_rows), ceil(k / scale_block_cols)] (per tensor: one
//         block of n x k; per channel: blocks of 1 x k; Qwen3-FP8: 128 x 128); value
//         (r, c) = e4m3(data[r * k + c]) * scales[(r / block_rows) * grid_cols + c /
//         block_cols]. Read by fp8.h's kernels. An MoE expert stack (moe_experts.h) holds
//         each expert matrix's grid after the previous one's (weight_readers.cuh's Fp8Rows).
//   MXFP4: OCP microscaling FP4 (gpt-oss's experts; only MoE expert stacks keep it):
//         GGUF's 17-byte blocks (engine/model/quant.h) split so that a block's 32 codes
//         are one aligned 16-byte load: `data` is [n, k / 2] bytes (block b of row r at
//         r * k / 2 + 16 b; value j < 16 of the block in the low nibble of byte j, value
//         16 + j in its high nibble), `scales` [n, k / 32] E8M0 exponent bytes; value =
//         kMxfp4Values[code] * 2^(e - 127). k * 17 / 32 bytes a row, as in the file.
//   NVFP4: GGUF's 36-byte blocks as they are (BlockNVFP4, engine/model/quant.h; ModelOpt
//         checkpoints repacked into them at load), row r at r * k / 64 * 36, then `scales`
//         [n] f32: each row's tensor scale (the parts of a fused matrix and the experts of
//         a stack each have their own); value = e2m1 * e4m3(sub-block scale) * scales[r],
//         the kernels multiplying row r's sums by scales[r] (nvfp4.h; weight_readers.cuh's
//         Nvfp4Rows and row_scale).
// A fused matrix whose parts are stored in different formats (Q4_K_M keeps q and k in
// Q4_K and v in Q6_K in half the layers) is a chain: rows [0, rows) in this format, the
// rest in `tail` (rows 0: this part holds every remaining row).
enum class WeightFormat : uint8_t {
  HALF, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, FP8, MXFP4, NVFP4, Q5_0, Q5_1,
  COUNT  // not a format: how many there are (each has a row in block_formats.cu)
};
struct DeviceMatrix {
  WeightFormat format = WeightFormat::HALF;
  const void* data = nullptr;
  const void* scales = nullptr;  // Q8_0, FP8, MXFP4 and NVFP4 only
  int32_t rows = 0;
  const DeviceMatrix* tail = nullptr;
  int32_t scale_block_rows = 0, scale_block_cols = 0;  // FP8 only
};

// The KV cache: the compute type itself (BF16 or F16), or FP8 e4m3 with scales.
enum class KvDtype : uint8_t { BF16, F16, FP8 };

// A layer's cache geometry. Slot s = block * block_size + offset (Batch's slot_mapping)
// holds K (and V) of one token for every kv head: head h's head_dim values start at
// element (s * num_kv_heads + h) * head_dim. Layers may differ in kv heads and head_dim
// (Gemma 4), in nothing else.
struct KvShape {
  KvDtype dtype = KvDtype::BF16;
  int32_t block_size = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t num_slots = 0;  // num_blocks * block_size
};

// One layer's cache. BF16 / F16: k and v hold __nv_bfloat16 / __half. FP8: they hold e4m3 bytes, and
// k_scale / v_scale one exponent byte per (slot, kv head), at s * num_kv_heads + h
// (see fp8_scale_value in common.cuh); null for BF16. A sliding-window layer may hold
// fewer blocks than the others (Backend::init_windowed_kv_cache): ids [0, num_blocks).
struct KvLayer {
  void* k = nullptr;
  void* v = nullptr;
  uint8_t* k_scale = nullptr;
  uint8_t* v_scale = nullptr;
  int64_t num_blocks = 0;  // blocks with storage here; 0: not stated (kernel checks that build one)
  int32_t num_kv_heads = 0;  // this layer's geometry (KvShape's), which the block copies read
  int32_t head_dim = 0;
};

// Batch (engine/backend/backend.h) copied to the device. Rows padded up to a CUDA graph's
// bucket have slot_mapping -1 (nothing written) and belong to padding sequences with
// context_lens 0 (their attention output is zeros).
struct DeviceBatch {
  const int32_t* token_ids = nullptr;     // [num_tokens]
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* slot_mapping = nullptr;  // [num_tokens]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs * max_blocks_per_seq]
  // With recurrent layers, the step's own sequences (before rows_as_sequences made each row
  // one), padded to num_seqs with sequences of no rows: their state slots (-1: none) and rows.
  const int32_t* state_slots = nullptr;        // [num_seqs]
  const int32_t* state_query_start = nullptr;  // [num_seqs + 1]
  int32_t max_blocks_per_seq = 0;
  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
};

}  // namespace spark::cuda
