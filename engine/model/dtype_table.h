// dtype_table.h — the one table of the element types a weight file may hold: each type's
// name, its block geometry, its GGUF type id and safetensors name, the half-float scales
// in each block that a damaged file can break, and its reference decoder. Names, sizes,
// the GGUF and safetensors readers, dequantize_row, the block-scale check and dummy weights
// (encoders, accepted types) all read this table: a DType without its row does not compile.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/model/tensor.h"

namespace spark {

// A half-float scale at `offset` in every block, named as the block struct names it.
struct BlockScaleField {
  uint16_t offset = 0;
  const char* field = nullptr;  // nullptr: no (further) scale
};

struct DTypeInfo {
  DType type;
  const char* name;     // "Q4_K"; also the safetensors dtype string where in_safetensors
  int64_t block_elems;  // values a block packs; 1 for plain types
  int64_t block_bytes;  // bytes of a block (of one value for plain types)
  int32_t ggml_type;    // GGUF's type id; -1 when GGUF files do not hold it
  bool in_safetensors;  // a dtype safetensors files name
  BlockScaleField scales[2];
  // `blocks` blocks at `src` to f32 at `dst`, exactly as the reference (GGML, PyTorch)
  // computes them; nullptr when weights of this type are not read.
  void (*decode)(const uint8_t* src, float* dst, int64_t blocks);
  // `n` f32 values (whole blocks) into this type at `dst`, rounded to nearest (quantize.h's
  // quantizers for block types); nullptr when nothing writes this type row by row (FP8's
  // scales need a band of rows: quantize_fp8_e4m3).
  void (*encode)(const float* src, void* dst, int64_t n);
  bool dummy;  // a dtype dummy weights are made in (model.dtype of a dummy load)
};

const DTypeInfo& dtype_info(DType t);
// nullptr when no row has it.
const DTypeInfo* dtype_of_ggml_type(uint32_t ggml_type);
const DTypeInfo* dtype_of_safetensors_name(std::string_view name);
// "F32, F16, ..." of the types GGUF / safetensors files may hold, in table order.
std::string gguf_dtype_list();
std::string safetensors_dtype_list();
// "F32, F16, ... or Q4_K": the types dummy weights are made in, in table order.
std::string dummy_dtype_list();

}  // namespace spark
