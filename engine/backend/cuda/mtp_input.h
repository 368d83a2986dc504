// mtp_input.h — an MTP head's input stage (ModelSpec::mtp_head, as CpuBackend::embed_mtp_input
// computes it): per row, x = fc · [rmsnorm(embedding[token], embed_norm); rmsnorm(hidden_in[row],
// hidden_norm)], the embedding half first.
//
// Cost per row, beside the embedding gather before it: hidden_in's H f32 values are copied in
// (4H bytes, from pageable host memory as every hidden_in does); the two norms (rms_norm.h's
// kernel, a launch each) read the embedded row and the hidden row (8H bytes) and write 2H
// 16-bit values (4H bytes); the fc GEMM reads those (4H bytes) and writes H f32 values (4H
// bytes). Per step, the fc matrix, H x 2H (4H² bytes in BF16: 16 MiB at H = 2048), is read
// once for up to kGemvMaxRows rows (the GEMV), as every matrix of the head's layer and its
// LM head are.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/backend/cuda/gemm.h"
#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

struct MtpInput {
  const DeviceMatrix* fc = nullptr;    // [H, 2H]: DeviceWeights::mtp_fc
  const float* embed_norm = nullptr;   // [H], f32, as used (1 + w for zero-centred norms)
  const float* hidden_norm = nullptr;  // [H]
  int32_t hidden = 0;                  // H, a multiple of 8
  float eps = 0;
};

// The stage on `rows` rows of which the first `hidden_rows` come with a hidden state:
// x [rows, H] f32 holds the embedded rows on entry and the fc's output on return.
// hidden_in [hidden_rows, H] f32 on the host is copied into `scratch` (f32, rows x H);
// the rows after hidden_rows (a padded batch's padding) get a zero hidden half. `pair`
// [rows, 2H] in the compute type `type` takes the normed halves. Launches on `stream`;
// programmatic as Gemm::linear takes it (the norms are normal launches).
void mtp_input(Gemm& gemm, HalfType type, const MtpInput& w, const float* hidden_in, int32_t hidden_rows, int32_t rows,
               float* x, float* scratch, void* pair, cudaStream_t stream, bool programmatic);

}  // namespace spark::cuda
