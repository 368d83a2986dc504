// sampler.h — turns one row of logits into the next token: logit bias, penalties,
// temperature, min-p / top-k / top-p truncation, a per-sequence seeded draw, logprobs.
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/core/sequence.h"
#include "engine/step/step.h"

namespace spark {

namespace constrain {
class Matcher;
}

// A uniform double in [0, 1) that depends only on (seed, counter): the draw for a
// sequence's n-th output token is uniform01(seed, n), so it is the same whatever else is
// in the batch, and the same again after a preemption recomputes the sequence.
double uniform01(uint64_t seed, uint64_t counter);

// Order of operations (vLLM's): logits + logit_bias; EOS / stop_token_ids masked while
// fewer than min_tokens were generated; repetition penalty over prompt and output
// tokens; presence and frequency penalties over output tokens. Logprobs are the
// log-softmax of these adjusted logits (before temperature and truncation: they describe
// the model's distribution as the request shaped it, not the sampling knobs), floored at
// -9999 so they stay finite in JSON. Then greedy argmax (lowest id on ties) when
// temperature == 0, else temperature, min_p (relative to the most likely token), top_k,
// top_p on the renormalized remainder, and an inverse-CDF draw.
class Sampler {
 public:
  Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids);

  // Samples seq's next token (output index seq.num_output_tokens()) from its logits row.
  SampleOutput sample(const float* logits, const Sequence& seq);

  // The same with the context spelled out: context = prompt followed by output tokens.
  // With a matcher (structured output), tokens its grammar does not allow next are
  // masked before anything else (end-of-sequence and stop_token_ids only where the value
  // is complete), and the matcher advances by the drawn token. `max_output_tokens` (the
  // sequence's resolved limit; 0: none) makes the value close before the limit cuts it.
  SampleOutput sample(const float* logits, const SamplingParams& params, std::span<const int32_t> context,
                      int64_t num_prompt_tokens, uint64_t seed, uint64_t counter,
                      constrain::Matcher* matcher = nullptr, int64_t max_output_tokens = 0);
  // The same under a mask computed elsewhere (constraint_mask below; in a pipeline the
  // head holds the matcher and the worker samples): ids whose bit is clear are never drawn.
  SampleOutput sample(const float* logits, const SamplingParams& params, std::span<const int32_t> context,
                      int64_t num_prompt_tokens, uint64_t seed, uint64_t counter, const std::vector<uint64_t>& allowed);

  int64_t vocab_size() const { return vocab_size_; }
  // Seconds each constraint mask of the matcher overload took, until the executor hands
  // them to the metrics (StepExecutor::report_mask_times).
  std::vector<double>& mask_seconds() { return mask_seconds_; }

 private:
  void adjust_logits(const SamplingParams& params, std::span<const int32_t> context, int64_t num_prompt_tokens);
  void fill_logprobs(const SamplingParams& params, SampleOutput& out);
  SampleOutput sample_row(const SamplingParams& params, std::span<const int32_t> context, int64_t num_prompt_tokens,
                          uint64_t seed, uint64_t counter, const std::vector<uint64_t>* allowed);
  void apply_mask(const std::vector<uint64_t>& allowed);  // sampler_constraint.cpp
  int32_t draw(const SamplingParams& params, double u);

  int64_t vocab_size_;
  std::vector<int32_t> eos_ids_;
  std::vector<float> logits_;   // the row being worked on
  std::vector<float> probs_;
  std::vector<int32_t> order_;  // candidate ids, most likely first
  std::vector<int32_t> counts_; // output-token counts for the penalties (sparse reset)
  std::vector<uint8_t> seen_;   // context tokens for the repetition penalty (sparse reset)
  std::vector<uint64_t> allowed_;  // the constraint's token mask, one bit per id
  std::vector<double> mask_seconds_;
};

// Structured output (sampler_constraint.cpp). The mask of the grammar's next tokens for a
// row with `tokens_left` output tokens left, this one counted (0: no limit), with the EOS
// ids and the request's stop_token_ids set exactly where the value may end. Returns the
// seconds it took (the mask-time metric).
double constraint_mask(constrain::Matcher& matcher, std::span<const int32_t> eos_ids, const SamplingParams& params,
                       int64_t tokens_left, std::vector<uint64_t>& mask);
// Steps the matcher by a drawn token (EOS and stop tokens end the output instead).
void advance_constraint(constrain::Matcher& matcher, std::span<const int32_t> eos_ids, const SamplingParams& params,
                        int32_t token);

}  // namespace spark
