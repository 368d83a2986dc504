// q5_1.cu — the Q5_1 kernels (block_formats.h): block_gemv.cuh over BlockReader<Q5_1>.
//
// Where. llama-quantize writes Q5_1 for the rows of a Q5_K_M (and Q5_K_S) file that are not
// whole 256-value blocks (Gemma-4-26B-A4B's 704- and 2112-column down projections).
//
// Bytes. A Q5_1 block holds 32 weights in 24 bytes (d, m, 4 bytes of fifth bits, 16 bytes
// of nibbles): 0.75 bytes a weight, 38% of BF16.
//
// Instructions. As Q5_0 with the min added in place of the 16 subtracted: about 7 + 2r
// lane operations a weight. The 24-byte blocks are 4-byte aligned: six 4-byte loads per 32
// weights. GB10 (~218e9 / 0.75 ≈ 291e9 weights/s, ~52 operations a weight available):
// bandwidth-bound up to 8 rows; H100: issue-bound from one row.
//
// Loads in flight: one lane decodes one whole block; a warp step is 32 blocks, 768
// contiguous bytes, each byte read by one lane.
#include "engine/backend/cuda/block_gemv.cuh"

namespace spark::cuda {
SPARK_INSTANTIATE_BLOCK_FORMAT(WeightFormat::Q5_1);
}  // namespace spark::cuda
