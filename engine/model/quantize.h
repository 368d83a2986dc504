// quantize.h — f32 rows into GGML Q8_0 and Q4_K blocks (the layouts of quant.h), for
// dummy weights in those formats: benchmarks and memory plans of quantized models that
// need no file. Not llama.cpp's quantizers (no importance weights, no search over
// scales): round to nearest on each block's own range, which is what a dummy needs.
#pragma once
#include <cstdint>

namespace spark {

// n f32 values (a multiple of 32) -> n / 32 BlockQ8_0 at dst: d = max|x| / 127.
void quantize_q8_0(const float* x, void* dst, int64_t n);
// n f32 values (a multiple of 256) -> n / 256 BlockQ4_K at dst: each sub-block of 32 maps
// [min(x, 0), max(x)] onto 0..15 with a 6-bit scale and min under the block's d and dmin.
void quantize_q4_k(const float* x, void* dst, int64_t n);

}  // namespace spark
