// causal_conv.h — the depthwise causal conv1d with SiLU that the hybrids' recurrent mixers
// run over their projected channels (Gated DeltaNet's q|k|v, Mamba-2's x|B|C), carrying each
// sequence's last kernel - 1 inputs per channel in its state.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/step/step.h"
#include "engine/util/thread_pool.h"

namespace spark::cpu {

// out[r, c] = silu(bias[c] + sum_k taps[c, k] * input K - 1 - k rows back), for `channels`
// channels of width-`in_stride` rows of `in` starting at column `in_offset`, into rows of
// `channels` floats of `out`. Rows before the step come from each sequence's state
// (states[s]: channels x (K - 1), oldest first), which then moves on. `taps`: [channels x
// K], the newest input's tap last; `bias`: [channels], or null.
void causal_conv1d_silu(ThreadPool& pool, const Batch& batch, const std::vector<float*>& states, const float* taps,
                        const float* bias, int64_t channels, int64_t kernel, const float* in, int64_t in_stride,
                        int64_t in_offset, float* out);

}  // namespace spark::cpu
