// window_blocks.h — the check that keeps a step inside the blocks sliding-window layers
// hold, where a cache keeps those layers' K and V for the first window_blocks blocks only
// (Backend::init_windowed_kv_cache). Backends run it before a step; a pipeline's worker
// gets its steps from the peer, so a bad step must be an error, never a stray read.
#pragma once
#include <cstdint>

#include "engine/step/step.h"

namespace spark {

// Throws InputError ("invalid batch: ...") unless every new token's slot and every block
// the window of a sequence's first new row reaches (its last sliding_window - 1 tokens and
// the new ones; the block manager moves only blocks wholly behind it) lie in blocks
// [0, window_blocks). The batch's shape is checked already.
void check_window_blocks(const Batch& b, int64_t window_blocks, int64_t block_size, int64_t sliding_window);

}  // namespace spark
