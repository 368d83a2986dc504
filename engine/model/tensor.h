// tensor.h — element types and the read-only tensor view shared by loaders and backends.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spark {

// Every element type a weight file may hold. Block-quantized types (Q*) pack
// block_elems() values into block_bytes() bytes along the innermost dimension. What each
// type is lives in one table, engine/model/dtype_table.h.
enum class DType : uint8_t {
  F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2,
  Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K,
  MXFP4,  // OCP microscaling FP4: 32 E2M1 values sharing a power-of-two (E8M0) scale
  NVFP4,  // NVIDIA FP4: 64 E2M1 values, an E4M3 scale per 16, times the tensor's f32 scale
  // GGUF's 5-bit blocks of 32: what llama-quantize stores for Q4_K (Q5_0) and Q5_K (Q5_1)
  // rows that are not whole 256-value blocks (Gemma 4 26B-A4B's 704-wide experts).
  Q5_0, Q5_1,
  COUNT   // not a type: how many there are (each has a row in dtype_table.cpp)
};

std::string_view dtype_name(DType t);
bool dtype_is_quantized(DType t);
int64_t dtype_block_elems(DType t);  // 1 for plain types
int64_t dtype_block_bytes(DType t);  // bytes of one element for plain types
// Bytes of a tensor of `elems` elements whose innermost dimension is `row`; throws
// InputError when `row` is not a multiple of the block size.
size_t dtype_nbytes(DType t, int64_t elems, int64_t row);

// A view of one tensor. `shape` is outermost-first as in PyTorch / safetensors (a GGUF
// tensor's ne[] is reversed to match). The bytes live in a mapping or buffer owned by
// Weights; the view never owns them.
struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
  // F8_E4M3 weights of an FP8 checkpoint (engine/model/fp8_weights.h): value (r, c) is
  // e4m3(r, c) * scale[(r / scale_block_rows) * scale_grid_cols() + c / scale_block_cols],
  // f32 scales owned by the Weights holding the tensor (or the file's mapping). Per tensor:
  // one block of rows() x cols(); per channel: blocks of 1 x cols(); 128x128 blocks as in
  // Qwen3-FP8. NVFP4 weights (engine/model/nvfp4_weights.h): their blocks' values times one
  // scale per tensor (ModelOpt's weight_scale_2); none means 1.
  const float* scale = nullptr;
  int64_t scale_block_rows = 0, scale_block_cols = 0;
  // An NVFP4 weight of a ModelOpt checkpoint as the file holds it, not yet repacked: `data`
  // is ModelOpt's codes ([rows, cols / 2], value 2k in the low nibble of byte k) and this
  // its E4M3 block scales ([rows, cols / 16]); nbytes counts GGUF's blocks, which
  // nvfp4_weights.h's nvfp4_rows makes of them a band of rows at a time (the CUDA upload,
  // so no host copy of the model is made) or materialize_nvfp4 all at once (the CPU backend).
  const uint8_t* modelopt_block_scales = nullptr;

  int64_t numel() const;
  int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  int64_t scale_grid_rows() const { return (rows() + scale_block_rows - 1) / scale_block_rows; }
  int64_t scale_grid_cols() const { return (cols() + scale_block_cols - 1) / scale_block_cols; }
};

}  // namespace spark
