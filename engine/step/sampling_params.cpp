// sampling_params.cpp — validation of SamplingParams with messages a client can act on.
#include "engine/step/sampling_params.h"

#include <cmath>

#include "engine/util/check.h"

namespace spark {

namespace {

[[noreturn]] void invalid(const std::string& name, const std::string& what) {
  throw InputError("invalid sampling parameter '" + name + "': " + what);
}

void check_finite(const std::string& name, double v) {
  if (!std::isfinite(v)) invalid(name, "must be a finite number, got " + std::to_string(v));
}

void check_range(const std::string& name, double v, double lo, double hi) {
  check_finite(name, v);
  if (v < lo || v > hi)
    invalid(name, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(v));
}

void check_token(const std::string& name, int64_t id, int64_t vocab_size) {
  if (id < 0 || (vocab_size > 0 && id >= vocab_size))
    invalid(name, "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
}

}  // namespace

void SamplingParams::validate(int64_t vocab_size) const {
  check_finite("temperature", temperature);
  if (temperature < 0) invalid("temperature", "must be >= 0, got " + std::to_string(temperature));
  if (temperature > 0 && temperature < 1e-2)
    invalid("temperature", "must be 0 (greedy) or >= 0.01, got " + std::to_string(temperature));
  if (top_k < -1) invalid("top_k", "must be -1 (off), 0 (off) or a positive count, got " + std::to_string(top_k));
  check_finite("top_p", top_p);
  if (top_p <= 0 || top_p > 1) invalid("top_p", "must be in (0, 1], got " + std::to_string(top_p));
  check_range("min_p", min_p, 0, 1);
  check_finite("repetition_penalty", repetition_penalty);
  if (repetition_penalty <= 0 || repetition_penalty > 10)
    invalid("repetition_penalty", "must be in (0, 10], got " + std::to_string(repetition_penalty));
  check_range("presence_penalty", presence_penalty, -2, 2);
  check_range("frequency_penalty", frequency_penalty, -2, 2);

  if (logit_bias.size() > kMaxLogitBias)
    invalid("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " entries, got " + std::to_string(logit_bias.size()));
  for (const auto& [id, bias] : logit_bias) {
    check_token("logit_bias", id, vocab_size);
    check_range("logit_bias", bias, -100, 100);
  }
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs)
    invalid("top_logprobs", "must be in [0, " + std::to_string(kMaxTopLogprobs) + "], got " + std::to_string(top_logprobs));
  if (top_logprobs > 0 && !logprobs) invalid("top_logprobs", "needs logprobs to be enabled");

  if (max_tokens && *max_tokens < 1) invalid("max_tokens", "must be >= 1, got " + std::to_string(*max_tokens));
  if (min_tokens < 0) invalid("min_tokens", "must be >= 0, got " + std::to_string(min_tokens));
  if (max_tokens && min_tokens > *max_tokens)
    invalid("min_tokens", "must be <= max_tokens (" + std::to_string(*max_tokens) + "), got " + std::to_string(min_tokens));

  if (stop.size() > kMaxStopStrings)
    invalid("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings, got " + std::to_string(stop.size()));
  for (const auto& s : stop) {
    if (s.empty()) invalid("stop", "stop strings must not be empty");
    if (s.size() > kMaxStopStringBytes)
      invalid("stop", "a stop string is at most " + std::to_string(kMaxStopStringBytes) + " bytes, got " + std::to_string(s.size()));
  }
  if (stop_token_ids.size() > kMaxStopTokenIds)
    invalid("stop_token_ids", "at most " + std::to_string(kMaxStopTokenIds) + " ids, got " + std::to_string(stop_token_ids.size()));
  for (int32_t id : stop_token_ids) check_token("stop_token_ids", id, vocab_size);
}

}  // namespace spark
