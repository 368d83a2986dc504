// tensor.cpp — element type properties and Tensor helpers.
#include "engine/model/tensor.h"

#include <limits>

#include "engine/util/check.h"

namespace spark {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::F8_E5M2: return "F8_E5M2";
    case DType::Q4_0: return "Q4_0";
    case DType::Q4_1: return "Q4_1";
    case DType::Q8_0: return "Q8_0";
    case DType::Q4_K: return "Q4_K";
    case DType::Q5_K: return "Q5_K";
    case DType::Q6_K: return "Q6_K";
    case DType::MXFP4: return "MXFP4";
  }
  return "?";
}

bool dtype_is_quantized(DType t) { return dtype_block_elems(t) > 1; }

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q8_0:
    case DType::MXFP4: return 32;
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return 256;
    default: return 1;
  }
}

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16:
    case DType::I16: return 2;
    case DType::I8:
    case DType::U8:
    case DType::BOOL:
    case DType::F8_E4M3:
    case DType::F8_E5M2: return 1;
    case DType::Q4_0: return 2 + 16;               // f16 scale, 32 x 4 bits
    case DType::Q4_1: return 2 + 2 + 16;           // f16 scale, f16 min, 32 x 4 bits
    case DType::Q8_0: return 2 + 32;               // f16 scale, 32 x int8
    case DType::Q4_K: return 2 + 2 + 12 + 128;     // d, dmin, 8 x 6-bit scale/min, 256 x 4 bits
    case DType::Q5_K: return 2 + 2 + 12 + 32 + 128;  // as Q4_K plus the fifth bits
    case DType::Q6_K: return 128 + 64 + 16 + 2;    // low 4 bits, high 2 bits, int8 scales, d
    case DType::MXFP4: return 1 + 16;              // E8M0 scale, 32 x 4-bit E2M1
  }
  return 1;
}

size_t dtype_nbytes(DType t, int64_t elems, int64_t row) {
  if (elems < 0 || row < 0) throw InputError("negative tensor size");
  if (elems == 0) return 0;
  int64_t block = dtype_block_elems(t);
  if (row % block != 0)
    throw InputError("a " + std::string(dtype_name(t)) + " row of " + std::to_string(row) +
                     " elements is not a whole number of " + std::to_string(block) +
                     "-element blocks");
  uint64_t blocks = static_cast<uint64_t>(elems / block);
  uint64_t per = static_cast<uint64_t>(dtype_block_bytes(t));
  if (blocks > std::numeric_limits<uint64_t>::max() / per)
    throw InputError("tensor byte size overflows");
  return static_cast<size_t>(blocks * per);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // shapes are validated against overflow at load
  return n;
}

}  // namespace spark
