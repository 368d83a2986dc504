// q4_1.cu — the Q4_1 kernels (block_formats.h): block_gemv.cuh over BlockReader<Q4_1>.
//
// Bytes. A Q4_1 block holds 32 weights in 20 bytes (d, m, 16 bytes of nibbles): 0.625
// bytes a weight, 31% of BF16 (SmolLM2's Q4_1 files); an 8B Q4_1 reads ~4.9 GB a token:
// ~45 tokens/s on GB10 (~218 GB/s), ~610 on H100 (~3.0 TB/s).
//
// Instructions. Per weight: shift and mask, int -> f32, multiply by d, add m; per weight
// and activation row an x convert and an FMA: about 5 + 2r lane operations a weight, five
// four-byte loads per 32 weights. GB10 streams 218e9 / 0.625 ≈ 349e9 weights/s against
// ~15e12 lane operations/s (~43 a weight): bandwidth-bound up to 8 rows. H100 (~6 a
// weight): near its limit at one row, issue-bound beyond.
//
// Loads in flight: one lane decodes one whole block; a warp step is 32 blocks, 640
// contiguous bytes, each byte read by one lane.
#include "engine/backend/cuda/block_gemv.cuh"

namespace spark::cuda {
SPARK_INSTANTIATE_BLOCK_FORMAT(WeightFormat::Q4_1);
}  // namespace spark::cuda
