// q5_k.cu — the Q5_K kernels (block_formats.h): block_gemv.cuh over BlockReader<Q5_K>.
//
// Bytes. A Q5_K super-block holds 256 weights in 176 bytes (d, dmin, twelve scale bytes,
// 32 bytes of fifth bits, 128 bytes of nibbles): 0.6875 bytes a weight, 34% of BF16; an
// 8B Q5_K_M reads ~5.6 GB a token: ~39 tokens/s on GB10 (~218 GB/s), ~530 on H100.
//
// Instructions. As Q4_K plus a shift, mask and or for the fifth bit: about 7 + 2r lane
// operations a weight. GB10 streams 218e9 / 0.6875 ≈ 317e9 weights/s against ~15e12 lane
// operations/s (~47 a weight): bandwidth-bound at every row count up to 8. H100 streams
// ~4.4e12 weights/s against ~30e12 (~7 a weight): issue-bound from one row on; dp4a on
// int8-quantized activations is the way there, as for Q4_K.
//
// Loads in flight: as q4_k.cu (a warp step is four super-blocks, 704 contiguous bytes;
// eight lanes share each super-block's 32 bytes of fifth bits).
#include "engine/backend/cuda/block_gemv.cuh"

namespace spark::cuda {
SPARK_INSTANTIATE_BLOCK_FORMAT(WeightFormat::Q5_K);
}  // namespace spark::cuda
