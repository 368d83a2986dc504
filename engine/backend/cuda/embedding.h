// embedding.h — launcher for the token embedding gather.
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

}  // namespace spark::cuda
