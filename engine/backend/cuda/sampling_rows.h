// sampling_rows.h — the packed per-row records DeviceSampler uploads and reads back, and
// the launcher of the per-row sampling kernel (sampling_kernel.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/step/sampling_params.h"

namespace spark::cuda::sampling {

enum RowFlags : uint32_t { kGreedy = 1u, kLogprobs = 2u, kRepetition = 4u, kTopP = 8u };

// One row's knobs, already reduced on the host to what the kernel tests.
struct RowParams {
  uint64_t seed = 0;
  uint64_t counter = 0;
  double top_p = 1.0;     // used when flags & kTopP
  float inv_t_hi = 1.0f;  // 1 / temperature as a float pair: hi + lo (the CPU multiplies by a double)
  float inv_t_lo = 0.0f;
  float min_p = 0.0f;       // smallest float >= params.min_p, so p < min_p is the CPU's test; 0 = off
  float repetition = 1.0f;  // used when flags & kRepetition
  int32_t top_k = 0;        // 0 = off (only 0 < top_k < vocab is on)
  uint32_t flags = 0;
  int32_t num_top_logprobs = 0;
  // Ranges into this step's lists: logit_bias pairs, penalty pairs, masked ids.
  int32_t bias_begin = 0, bias_count = 0;
  int32_t penalty_begin = 0, penalty_count = 0;
  int32_t mask_begin = 0, mask_count = 0;
};

struct IdValue {
  int32_t id;
  float value;
};

struct RowResult {
  int32_t token;
  float logprob;
  int32_t num_top;
  int32_t top_ids[kMaxTopLogprobs];
  float top_logprobs[kMaxTopLogprobs];
};

struct KernelArgs {
  float* logits;  // [rows, vocab]
  int32_t vocab;
  const RowParams* params;   // [rows]
  const IdValue* bias;       // logit_bias (id, bias), unique ids per row
  const IdValue* penalties;  // (id, presence/frequency amount), unique ids per row
  const int32_t* masks;      // ids set to -inf (min_tokens)
  RowResult* results;        // [rows]
};

// One CTA per row.
void launch_sample_rows(const KernelArgs& args, int32_t rows, cudaStream_t stream);

// For the check program: out[i] = splitmix_uniform01(seeds[i], counters[i]) computed on the device.
void launch_uniform01(const uint64_t* seeds, const uint64_t* counters, double* out, int32_t n, cudaStream_t stream);

}  // namespace spark::cuda::sampling
