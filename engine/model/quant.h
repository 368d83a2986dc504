// quant.h — conversion of stored weight rows (plain and GGML block-quantized) to f32.
#pragma once
#include <cstdint>

#include "engine/model/tensor.h"

namespace spark {

float f16_to_f32(uint16_t h);   // exact, including subnormals, infinities and NaN
float bf16_to_f32(uint16_t b);  // exact
uint16_t f32_to_bf16(float f);  // round to nearest even, NaN kept quiet

// True for the types dequantize_row() accepts: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K,
// Q5_K, Q6_K.
bool dequant_supported(DType t);

// Converts `n` consecutive elements starting at the block boundary `src` to f32, exactly
// as GGML defines each format (the same operations in the same order as
// ggml-quants.c / gguf-py, so results are bit-identical). `n` must be a multiple of the
// type's block size; SPARK_CHECK guards both preconditions (callers validate files).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// Row `row` of a 2-D view (or of a tensor flattened to rows() x cols()) as f32.
void dequantize_tensor_row(const Tensor& t, int64_t row, float* dst);

}  // namespace spark
