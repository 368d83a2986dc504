// q6_k.cu — the Q6_K kernels (block_formats.h): block_gemv.cuh over BlockReader<Q6_K>.
//
// Bytes. A Q6_K super-block holds 256 weights in 210 bytes (128 bytes of low nibbles, 64
// of high bit pairs, sixteen int8 scales, d): 0.82 bytes a weight, 41% of BF16. Q4_K_M
// files keep the output matrix, and v and down in half the layers, in Q6_K: in
// Llama-3.1-8B Q4_K_M ~1.4 GB of the ~4.6 GB read a token.
//
// Instructions. Per weight: two shifts and masks (nibble and bit pair), an or, a subtract
// of 32, one int -> f32 convert, one multiply by d * scale; per weight and activation row:
// one x convert and one FMA. About 6 + 2r lane operations a weight. The 210-byte blocks
// are only 2-byte aligned, so words are read as two 2-byte loads: 32 loads per 32
// weights, one a weight. GB10 streams 218e9 / 0.82 ≈ 266e9 weights/s against ~15e12 lane
// operations/s (~56 a weight): bandwidth-bound at every row count up to 8. H100 streams
// ~3.7e12 weights/s against ~30e12 (~8 a weight): about at the limit at one row,
// issue-bound beyond. Repacking the blocks to a 4-byte stride (212 bytes, +1%) would halve
// the loads on H100; GB10 does not need it.
//
// Loads in flight: as q4_k.cu (a warp step is four super-blocks, 840 contiguous bytes;
// two lanes share each 32 bytes of low nibbles, four each 32 bytes of high bits).
#include "engine/backend/cuda/block_gemv.cuh"

namespace spark::cuda {
SPARK_INSTANTIATE_BLOCK_FORMAT(WeightFormat::Q6_K);
}  // namespace spark::cuda
