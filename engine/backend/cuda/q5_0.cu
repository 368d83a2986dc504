// q5_0.cu — the Q5_0 kernels (block_formats.h): block_gemv.cuh over BlockReader<Q5_0>.
//
// Where. llama-quantize writes Q5_0 for the rows of a Q4_K_M (and Q4_K_S) file that are not
// whole 256-value blocks: Gemma-4-26B-A4B's experts' down_proj (704 columns) and its dense
// MLP's (2112), a third of its expert bytes. Kept packed, they read 0.6875 bytes a weight
// where the compute type read 2: 2.9x fewer bytes for those matrices.
//
// Bytes. A Q5_0 block holds 32 weights in 22 bytes (d, 4 bytes of fifth bits, 16 bytes of
// nibbles): 0.6875 bytes a weight, 34% of BF16.
//
// Instructions. Per weight: shift and mask the nibble, shift and mask its fifth bit, or,
// int -> f32, subtract 16, multiply by d; per weight and activation row an x convert and
// an FMA: about 7 + 2r lane operations a weight. The 22-byte blocks are 2-byte aligned, so
// words are two 2-byte loads (10 per 32 weights). GB10 streams 218e9 / 0.6875 ≈ 317e9
// weights/s against ~15e12 lane operations/s (~47 a weight): bandwidth-bound up to 8 rows.
// H100 (~5 a weight at 3.0 TB/s): issue-bound from one row, as Q4_K.
//
// Loads in flight: one lane decodes one whole block; a warp step is 32 blocks, 704
// contiguous bytes, each byte read by one lane.
#include "engine/backend/cuda/block_gemv.cuh"

namespace spark::cuda {
SPARK_INSTANTIATE_BLOCK_FORMAT(WeightFormat::Q5_0);
}  // namespace spark::cuda
