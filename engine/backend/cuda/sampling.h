// sampling.h — logits post-processing and sampling on the GPU, so that only token ids
// and requested logprobs come back to the host. Same semantics as the CPU Sampler
// (engine/core/sampler.h): logit bias, min_tokens masking, repetition / presence /
// frequency penalties, logprobs, greedy, temperature, min-p, top-k, top-p, seeded draws.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/step/step.h"

namespace spark::cuda {

// One logits row's request (row r of the logits belongs to rows[r]); see backend.h.
using SampleRow = spark::SampleRow;

class DeviceSampler {
 public:
  // max_rows: logits rows of the largest step; max_context: the longest context
  // (max_model_len) whose tokens a penalty may need. Allocates workspace_bytes(...) of
  // device memory and pinned host buffers once.
  DeviceSampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids, int32_t max_rows, int64_t max_context);
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;
  static size_t workspace_bytes(int64_t vocab_size, int32_t max_rows, int64_t max_context);

  // logits: [rows.size(), vocab_size] f32 in device memory, changed in place. Queues the
  // sampling of every row on `stream`, copies the token ids and the requested logprobs
  // back, and waits for them (the one host synchronisation of a step). out[r] is row r's.
  void sample(float* logits, const std::vector<SampleRow>& rows, std::vector<SampleOutput>& out, cudaStream_t stream);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace spark::cuda
