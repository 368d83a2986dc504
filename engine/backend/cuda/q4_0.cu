// q4_0.cu — the Q4_0 kernels (block_formats.h): block_gemv.cuh over BlockReader<Q4_0>.
//
// Bytes. A Q4_0 block holds 32 weights in 18 bytes (d, 16 bytes of nibbles): 0.5625 bytes
// a weight, as Q4_K; an 8B Q4_0 reads ~4.4 GB a token: ~50 tokens/s on GB10 (~218 GB/s),
// ~680 on H100 (~3.0 TB/s).
//
// Instructions. Per weight: shift and mask, int -> f32, subtract 8, multiply by d; per
// weight and activation row an x convert and an FMA: about 5 + 2r lane operations a
// weight. The 18-byte blocks are 2-byte aligned, so words are two 2-byte loads (8 per 32
// weights). GB10: ~38 operations a weight available, bandwidth-bound up to 8 rows. H100:
// ~5.6 available, issue-bound from one row (as Q4_K).
//
// Loads in flight: one lane decodes one whole block; a warp step is 32 blocks, 576
// contiguous bytes, each byte read by one lane.
#include "engine/backend/cuda/block_gemv.cuh"

namespace spark::cuda {
SPARK_INSTANTIATE_BLOCK_FORMAT(WeightFormat::Q4_0);
}  // namespace spark::cuda
