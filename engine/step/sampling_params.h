// sampling_params.h — what a request asks of the sampler and the stop checks, and
// their validation (shared by the engine and the HTTP layer).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace spark {

namespace constrain {
struct Constraint;
}

struct SamplingParams {
  double temperature = 1.0;         // 0 = greedy
  int32_t top_k = -1;               // -1 or 0 = off
  double top_p = 1.0;               // (0, 1]
  double min_p = 0.0;               // [0, 1]
  double repetition_penalty = 1.0;  // > 0; 1 = off; prompt and output tokens (HF semantics)
  double presence_penalty = 0.0;    // [-2, 2]; output tokens only (OpenAI semantics)
  double frequency_penalty = 0.0;   // [-2, 2]; output tokens only
  std::unordered_map<int32_t, float> logit_bias;  // token id -> added to its logit, [-100, 100]
  std::optional<uint64_t> seed;     // absent: the engine draws one at submit
  bool logprobs = false;            // report the chosen token's logprob
  int32_t top_logprobs = 0;         // 0..20 most likely tokens per position (needs logprobs)

  std::optional<int64_t> max_tokens;  // absent: up to max_model_len
  int64_t min_tokens = 0;             // EOS and stop_token_ids are masked before this many
  std::vector<std::string> stop;      // stop strings, not included in the output text
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  // false: no speculative drafts for this request even when the engine speculates (the
  // output is the same either way; this trades its speed for the batch's).
  bool speculative = true;
  // Structured output: the grammar the output must match (each sequence gets its own
  // matcher); null = unconstrained.
  std::shared_ptr<const constrain::Constraint> constraint;

  bool greedy() const { return temperature == 0.0; }

  // Throws InputError naming the first invalid parameter and the accepted range.
  // vocab_size bounds token ids in logit_bias and stop_token_ids.
  void validate(int64_t vocab_size) const;
};

// Upper bounds that keep one request from exhausting the engine (hostile inputs).
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr size_t kMaxStopStrings = 64;
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr size_t kMaxStopTokenIds = 1024;

}  // namespace spark
