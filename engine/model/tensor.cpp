// tensor.cpp — element type properties and Tensor helpers.
#include "engine/model/tensor.h"

#include <limits>

#include "engine/model/dtype_table.h"
#include "engine/util/check.h"

namespace spark {

std::string_view dtype_name(DType t) { return size_t(t) < size_t(DType::COUNT) ? dtype_info(t).name : "?"; }

bool dtype_is_quantized(DType t) { return dtype_block_elems(t) > 1; }

int64_t dtype_block_elems(DType t) { return dtype_info(t).block_elems; }

int64_t dtype_block_bytes(DType t) { return dtype_info(t).block_bytes; }

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
