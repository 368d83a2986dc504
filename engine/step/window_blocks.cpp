// window_blocks.cpp — see window_blocks.h.
#include "engine/step/window_blocks.h"

#include <algorithm>
#include <string>

#include "engine/util/check.h"

namespace spark {

void check_window_blocks(const Batch& b, int64_t window_blocks, int64_t block_size, int64_t sliding_window) {
  const int64_t window_slots = window_blocks * block_size;
  for (int32_t slot : b.slot_mapping)
    if (slot >= window_slots)
      throw InputError("invalid batch: slot " + std::to_string(slot) + " is outside the " +
                       std::to_string(window_blocks) + " blocks the sliding-window layers hold");
  for (int32_t s = 0; s < b.num_seqs(); ++s) {
    const int64_t ctx = b.context_lens[size_t(s)];
    const int64_t first_row = ctx - (b.query_start[size_t(s) + 1] - b.query_start[size_t(s)]);  // its position
    const int64_t first = std::max<int64_t>(0, first_row + 1 - sliding_window);
    for (int64_t k = first / block_size; k * block_size < ctx; ++k) {
      const int32_t block = b.block_tables[size_t(s) * size_t(b.max_blocks_per_seq) + size_t(k)];
      if (block >= window_blocks)
        throw InputError("invalid batch: block " + std::to_string(block) + " in sequence " + std::to_string(s) +
                         "'s window is not one of the " + std::to_string(window_blocks) +
                         " blocks the sliding-window layers hold");
    }
  }
}

}  // namespace spark
