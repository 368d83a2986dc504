// assistant.h — Gemma 4's assistant on the CUDA backend (ModelSpec::assistant_of_hidden): the
// stages around its layers, as the CPU backend computes them (engine/backend/cpu/assistant.cpp).
// Its layers' queries read the model's K and V in place (layer_forward.cu, rope_kv.h's
// queries-only mode); these are its input from the model's embedding and a hidden state of
// the model's width W, its hidden state back out in W, and its logits over its best clusters.
//
// Cost per drafted row, beside its layers: the model's embedding row (W values), the hidden
// row copied in (4W bytes), ASSIST_IN [hidden, 2W] and ASSIST_OUT [W, hidden] read once a
// step for all rows (the GEMV family), the centroids [clusters, hidden] likewise, and the
// LM head whole: the masking below keeps its logits exact but does not spare the head's
// bytes (the CPU backend computes the chosen clusters' rows only).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

// The largest number of clusters mask_to_best_clusters takes (a byte of shared memory each).
inline constexpr int32_t kMaxClusters = 32768;

struct AssistantInput {
  const DeviceMatrix* model_embedding = nullptr;  // the model's [vocab, W] table
  int64_t vocab = 0;
  int32_t model_width = 0;  // W, a multiple of 8
  float embed_scale = 1.0f;  // the model's normalizer (sqrt(W) where it scales its embedding)
  const DeviceMatrix* assist_in = nullptr;  // [hidden, 2 W]
  int32_t hidden = 0;
};

// x [rows, hidden] f32 = ASSIST_IN . [embed_scale x embedding row of token_ids[r]; hidden_in
// row r] for each row; hidden_in [hidden_rows, W] f32 on the host, and rows past
// hidden_rows (a padded batch's) get a zero hidden half. scratch: f32 [rows, 3 W]; pair:
// [rows, 2 W] of `type`. Launches on `stream`.
void assistant_input(Gemm& gemm, HalfType type, const AssistantInput& in, const int32_t* token_ids,
                     const float* hidden_in, int32_t hidden_rows, int32_t rows, float* scratch, void* pair, float* x,
                     cudaStream_t stream, bool programmatic);

// out [rows, W] f32 = ASSIST_OUT . h, h [rows, hidden] f32 (the normed final hidden state,
// rounded to `type` in half_rows [rows, hidden] first, as every GEMM input is).
void assistant_hidden_out(Gemm& gemm, HalfType type, const DeviceMatrix& assist_out, const float* h, int32_t rows,
                          int32_t hidden, int32_t model_width, void* half_rows, float* out, cudaStream_t stream);

// Each token's cluster: TOKEN_ORDERING lists cluster c's tokens at [c * V / C, (c + 1) * V / C).
std::vector<int32_t> token_clusters(const std::vector<int32_t>& ordering, int64_t clusters);

// transformers' Gemma4AssistantMaskedEmbedder over logits [rows, vocab] f32 in place: per row,
// the top_k clusters by scores [rows, clusters] (ties to the lower index) keep their tokens'
// logits, every other token gets the least of those minus 1. token_cluster [vocab] device.
void mask_to_best_clusters(float* logits, const float* scores, const int32_t* token_cluster, int32_t rows,
                           int32_t vocab, int32_t clusters, int32_t top_k, cudaStream_t stream);

}  // namespace spark::cuda
