// quantize.h — f32 rows into GGML Q8_0, Q4_K and MXFP4 blocks (the layouts of quant.h) and
// into FP8 e4m3 with f32 block scales (tensor.h): dummy weights in those formats (benchmarks
// and memory plans of quantized models that need no file) and weights quantized at load
// ([model] quantize, load_quantization.h). Not llama.cpp's K-quant search (no importance
// weights, no search over scales): round to nearest on each block's own range.
#pragma once
#include <cstdint>

namespace spark {

// n f32 values (a multiple of 32) -> n / 32 BlockQ8_0 at dst: d = max|x| / 127, as llama.cpp
// quantizes (the same bytes).
void quantize_q8_0(const float* x, void* dst, int64_t n);
// n f32 values (a multiple of 256) -> n / 256 BlockQ4_K at dst: each sub-block of 32 maps
// [min(x, 0), max(x)] onto 0..15 with a 6-bit scale and min under the block's d and dmin.
void quantize_q4_k(const float* x, void* dst, int64_t n);
// n f32 values (a multiple of 32) -> n / 32 BlockMXFP4 at dst: the block's scale 2^(e - 127)
// puts max|x| in [4, 8) (the OCP MX rule: floor(log2(max|x|)) minus E2M1's largest exponent,
// 2), each value then the nearest E2M1 code (ties to the even code), saturating at +-6.
void quantize_mxfp4(const float* x, void* dst, int64_t n);

// The e4m3 byte nearest to x (ties to the even code), saturating at +-448.
uint8_t f32_to_e4m3(float x);
// One band of `rows` rows of `cols` f32 values that share a row of scale blocks ->
// e4m3 bytes at q (rows x cols) and ceil(cols / block_cols) f32 scales, each its block's
// max|x| / 448 (1 for an all-zero block), as FP8 checkpoints' weight_scale_inv.
void quantize_fp8_e4m3(const float* x, int64_t rows, int64_t cols, int64_t block_cols, uint8_t* q, float* scales);

}  // namespace spark
