// kv_block_copy.h — Batch::block_copies on the device: the full-attention layers' K and V
// (and FP8 scales) of block src copied to block dst, before the step writes any KV.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "engine/backend/cuda/kernel_args.h"

namespace spark::cuda {

// `pairs`: (source, destination) block ids, flattened (Batch::block_copies). `layers`: a
// device array of the num_layers layers to copy in (the full-attention ones), each holding
// both ids, each with its own kv heads and head_dim (KvLayer); shape gives the dtype and
// block size. Queued on `stream` as ordinary launches (never captured into a graph): the
// step's kernels, or its decode graph's replay, queued after them see the copies.
void copy_kv_blocks(const std::vector<int32_t>& pairs, const KvLayer* layers, int32_t num_layers, const KvShape& shape,
                    cudaStream_t stream);

}  // namespace spark::cuda
