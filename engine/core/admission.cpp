// admission.cpp — a request checked against the model before it is queued.
#include "engine/core/admission.h"

#include <string>

namespace spark {

Admission::Admission(int64_t vocab_size, int64_t max_model_len) : vocab_size_(vocab_size), max_model_len_(max_model_len) {
  SPARK_CHECK(vocab_size > 0 && max_model_len > 0, "admission needs a vocabulary and a context");
}

int64_t Admission::check(std::span<const int32_t> ids, const SamplingParams& params, bool prompt_only) const {
  if (ids.empty()) throw InputError("the prompt is empty: at least one token is needed");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size_)
      throw InputError("prompt token " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                       " is outside the vocabulary [0, " + std::to_string(vocab_size_) + ")");
  params.validate(vocab_size_);
  const int64_t n = static_cast<int64_t>(ids.size()), limit = max_model_len_;
  if (prompt_only) {
    if (n > limit)
      throw ContextLengthError("the input has " + std::to_string(n) + " tokens, more than the model's context "
                               "(max_model_len) of " + std::to_string(limit) + " tokens",
                               n, std::nullopt, limit);
    return 1;
  }
  if (n >= limit)
    throw ContextLengthError("the prompt has " + std::to_string(n) + " tokens; the model's context (max_model_len) is " +
                                 std::to_string(limit) + " tokens, which leaves no room for output",
                             n, params.max_tokens, limit);
  if (!params.max_tokens) return limit - n;
  if (n + *params.max_tokens > limit)
    throw ContextLengthError("the prompt (" + std::to_string(n) + " tokens) plus max_tokens (" +
                                 std::to_string(*params.max_tokens) + ") is " + std::to_string(n + *params.max_tokens) +
                                 " tokens, more than the model's context (max_model_len) of " + std::to_string(limit) +
                                 " tokens",
                             n, params.max_tokens, limit);
  return *params.max_tokens;
}

}  // namespace spark
