// quant.h — the GGML block layouts, and conversion of stored weight rows (plain and
// block-quantized) to f32. The one definition of each block format: the CPU backend's
// decoders and the CUDA backend's repacking and kernels read these structs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "engine/model/tensor.h"

namespace spark {

// Layouts as written by GGUF files (little-endian, packed, no padding). `d`, `dmin` and
// `m` are IEEE half floats.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
// Q5_0 / Q5_1: value j's fifth bit is bit j of qh (little-endian), above its nibble in
// qs (low nibbles for j < 16, high after); Q5_0 is d * (q - 16), Q5_1 d * q + m.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// MXFP4 as GGUF stores it (ggml's block_mxfp4): value i of the block is
// kMxfp4Values[code] * 2^(e - 127), code i in the low nibble of qs[i] for i < 16 and in
// the high nibble of qs[i - 16] after. Hugging Face checkpoints keep e apart and pair
// neighbours in a byte; engine/model/arch/gpt_oss_checkpoint repacks them into this layout.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
inline constexpr float kMxfp4Values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                           -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
// 2^(e - 127) exactly (subnormal for e = 0, infinity for e = 255, as torch.ldexp gives).
float e8m0_to_f32(uint8_t e);
static_assert(sizeof(BlockMXFP4) == 17);
// NVFP4 as GGUF stores it (ggml's block_nvfp4): 64 values in four sub-blocks of 16, each
// with an E4M3 scale d[s] (its sign bit ignored); value j < 8 of sub-block s is
// kMxfp4Values[low nibble of qs[8 s + j]] * e4m3(d[s]), value j + 8 the high nibble.
// ModelOpt checkpoints pair neighbours in a byte and keep the scales apart;
// engine/model/nvfp4_weights repacks them into this layout. The tensor's f32 scale
// (Tensor::scale) multiplies every value.
struct BlockNVFP4 {
  uint8_t d[4];
  uint8_t qs[32];
};
static_assert(sizeof(BlockNVFP4) == 36);
// The magnitude of an E4M3 scale byte, sign bit ignored, as ggml reads NVFP4's (0x7F, NaN
// in E4M3, reads as 0; the loaders refuse such scales).
float ue4m3_to_f32(uint8_t v);
// One row of `cols` values (a multiple of 64) in ModelOpt's NVFP4 layout, its codes (two a
// byte, value 2k in the low nibble of byte k) and E4M3 block scales (one per 16), as GGUF's
// BlockNVFP4 blocks at dst: the same codes and scale bytes, rearranged.
void modelopt_nvfp4_row_to_blocks(const uint8_t* codes, const uint8_t* scales, int64_t cols, uint8_t* dst);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

float f16_to_f32(uint16_t h);   // exact, including subnormals, infinities and NaN
float bf16_to_f32(uint16_t b);  // exact
uint16_t f32_to_bf16(float f);  // round to nearest even, NaN kept quiet
uint16_t f32_to_f16(float f);   // round to nearest even (subnormals too), NaN kept quiet

// The reference decoders, one per row of the dtype table (dtype_table.h): `blocks` blocks
// (values, for plain types) at `src` to f32.
namespace decode {
void f32(const uint8_t* src, float* dst, int64_t blocks);
void f16(const uint8_t* src, float* dst, int64_t blocks);
void bf16(const uint8_t* src, float* dst, int64_t blocks);
void f8_e4m3(const uint8_t* src, float* dst, int64_t blocks);  // without the tensor's scales
void q8_0(const uint8_t* src, float* dst, int64_t blocks);
void q4_0(const uint8_t* src, float* dst, int64_t blocks);
void q4_1(const uint8_t* src, float* dst, int64_t blocks);
void q4_k(const uint8_t* src, float* dst, int64_t blocks);
void q5_k(const uint8_t* src, float* dst, int64_t blocks);
void q6_k(const uint8_t* src, float* dst, int64_t blocks);
void mxfp4(const uint8_t* src, float* dst, int64_t blocks);
void nvfp4(const uint8_t* src, float* dst, int64_t blocks);  // without the tensor's scale
void q5_0(const uint8_t* src, float* dst, int64_t blocks);
void q5_1(const uint8_t* src, float* dst, int64_t blocks);
}  // namespace decode

// True for the types dequantize_row() accepts: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K, MXFP4, and F8_E4M3 and NVFP4 (without their tensor's scales:
// dequantize_tensor_row applies them).
bool dequant_supported(DType t);

// Converts `n` consecutive elements starting at the block boundary `src` to f32, exactly
// as GGML defines each format (the same operations in the same order as
// ggml-quants.c / gguf-py, so results are bit-identical). `n` must be a multiple of the
// type's block size; SPARK_CHECK guards both preconditions (callers validate files).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

// A block scale that is NaN or infinite, as a damaged or crafted file may hold: every
// value of its block dequantizes to NaN or infinity, which then spreads to every logit.
struct BadBlockScale {
  int64_t block = 0;           // index among the tensor's blocks
  const char* field = nullptr;  // "d", "m" or "dmin": the struct member above
  float value = 0;
};
// The first block among the `nbytes` bytes of type-t blocks at `data` with a scale field
// (d of every format; m of Q4_1 and Q5_1; dmin of Q4_K and Q5_K) that is not finite; nullopt when
// all are, or when t has no half-float block scales. Reads 2 or 4 bytes a block, but
// touches every page of the tensor.
std::optional<BadBlockScale> find_nonfinite_block_scale(DType t, const void* data, size_t nbytes);

// Row `row` of a 2-D view (or of a tensor flattened to rows() x cols()) as f32; an FP8 or
// NVFP4 tensor's values times their scales (Tensor::scale).
void dequantize_tensor_row(const Tensor& t, int64_t row, float* dst);
// values[c] *= the scale of tensor t at (row, c), for the row's cols() values.
void apply_tensor_scales(const Tensor& t, int64_t row, float* values);

}  // namespace spark
