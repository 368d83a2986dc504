// q4_k.cu — the Q4_K kernels (block_formats.h): block_gemv.cuh over BlockReader<Q4_K>.
//
// Bytes. A Q4_K super-block holds 256 weights in 144 bytes (d, dmin, twelve bytes of
// 6-bit sub-block scales and mins, 128 bytes of nibbles): 0.5625 bytes a weight, 28% of
// BF16. Llama-3.1-8B Q4_K_M reads ~4.6 GB a token at batch 1 (its Q6_K tensors included,
// the embedding gathered a row at a time), so GB10 (~218 GB/s measured copy) tops out near
// 47 tokens/s and H100 (~3.0 TB/s) near 650.
//
// Instructions. Per weight: a shift and a mask of its nibble, one int -> f32 convert, one
// multiply by d * scale and one subtract of dmin * min (kept apart, as the CPU rounds
// them); per weight and activation row: one 16-bit -> f32 convert of x and one FMA; per
// 32 weights about 11 four-byte loads and the scale unpacking. About 5 + 2r lane
// operations a weight at r rows. GB10 streams 218e9 / 0.5625 ≈ 388e9 weights/s against
// ~15e12 lane operations/s (48 SMs x 128 lanes x ~2.4 GHz), ~38 a weight: bandwidth-bound
// at every row count up to 8 (8 rows: 21). H100 streams ~5.3e12 weights/s against
// ~30e12 lane operations/s, ~5.6 a weight: already issue-bound at one row (~7 needed:
// ~80% of the copy rate at best, ~2x the weight stream's time at 8 rows). Quantizing x to
// int8 once per layer and multiplying nibbles with dp4a (llama.cpp's mmvq) is the next
// step for H100; GB10, the product target, does not need it.
//
// Loads in flight. One warp per weight row; lane l decodes the row's 32-value parts l,
// l + 32, ...: a warp step covers four super-blocks (576 contiguous bytes). Two lanes
// share each 32 bytes of nibbles and eight share the 16 bytes of scales, served by L1 after
// the first. With the next part's loads issued before the current part's multiplies, a
// warp has ~576 bytes in flight; H100 wants ~18 KB a SM (32 resident warps cover it at
// n >= 4096: 512 blocks of 8 warps, 0.5 waves on 132 SMs), GB10 ~3 KB (6 warps; 4096
// rows are 1.3 waves on 48 SMs).
#include "engine/backend/cuda/block_gemv.cuh"

namespace spark::cuda {
SPARK_INSTANTIATE_BLOCK_FORMAT(WeightFormat::Q4_K);
}  // namespace spark::cuda
