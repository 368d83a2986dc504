// embedding.h — launchers for the token embedding gather, and an encoder's learned positions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

// out[t] = table[token_ids[t]] widened to f32 (the residual stream), hidden values per
// row. An id outside [0, vocab) gives a row of zeros (the host validates ids first; this
// only keeps a bad id from reading outside the table). T is the compute type, the table's
// (__nv_bfloat16 or __half).
template <typename T>
void embedding_gather(const int32_t* token_ids, int32_t num_tokens, const T* table, int64_t vocab, int32_t hidden,
                      float* out, cudaStream_t stream);

// The same from a Q8_0 table (kernel_args.h; hidden a multiple of 32).
void embedding_gather_q8_0(const int32_t* token_ids, int32_t num_tokens, const DeviceMatrix& table, int64_t vocab,
                           int32_t hidden, float* out, cudaStream_t stream);

// The same from a table in whatever format the device keeps it (DeviceMatrix::format: 16-bit
// in `type`, Q8_0, or another block format, block_formats.h).
void embedding_rows(HalfType type, const DeviceMatrix& table, const int32_t* token_ids, int32_t num_tokens,
                    int64_t vocab, int32_t hidden, float* out, cudaStream_t stream);

// An encoder's input beyond its token (ModelSpec::encoder): out[t] = pos_table[position_offset
// + positions[t]] + type0, f32 [num_tokens, hidden], which add_layer_norm (rms_norm.h) then
// adds to the gathered tokens and normalises (the CPU's word + (position + type) order).
// pos_table is [position_rows, hidden] f32, type0 token type 0's row [hidden] f32 or null
// (a model without token types). A row outside the table gives type0 alone (the host
// validates positions first; this only keeps a bad one from reading outside the table).
void encoder_position_rows(const int32_t* positions, int32_t num_tokens, const float* pos_table, int64_t position_offset,
                           int64_t position_rows, const float* type0, int32_t hidden, float* out, cudaStream_t stream);

}  // namespace spark::cuda
