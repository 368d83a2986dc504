// mxfp4.h — MXFP4 expert weights (gpt-oss) kept packed on the device: the upload that
// splits the file's 17-byte blocks into 16 code bytes and one E8M0 scale byte each
// (DeviceMatrix's MXFP4 layout, kernel_args.h), so that the MoE kernels read a block's
// 32 codes as one aligned 16-byte load (weight_readers.cuh's Mxfp4Rows decodes them).
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/model/tensor.h"

namespace spark::cuda {

// Device bytes of `rows` rows of k MXFP4 values: the codes (k / 2 a row), then the
// scales (k / 32 a row) from mxfp4_scales_offset(rows, k), each part 256-byte aligned.
size_t mxfp4_scales_offset(int64_t rows, int64_t k);
size_t mxfp4_bytes(int64_t rows, int64_t k);

// Repacks the MXFP4 tensor t ([rows, k] of GGUF blocks) to `codes` ([rows, k / 2]) and
// `scales` ([rows, k / 32]), both device memory, a bounded chunk of rows at a time.
void upload_mxfp4(const Tensor& t, void* codes, void* scales);

}  // namespace spark::cuda
