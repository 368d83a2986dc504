// sampler.cpp — logits processing and seeded token draws, one row at a time.
#include "engine/core/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "engine/util/check.h"
#include "engine/util/splitmix.h"

namespace spark {

namespace {

constexpr float kLogprobFloor = -9999.0f;

}  // namespace

double uniform01(uint64_t seed, uint64_t counter) { return splitmix_uniform01(seed, counter); }

Sampler::Sampler(int64_t vocab_size, std::vector<int32_t> eos_token_ids)
    : vocab_size_(vocab_size), eos_ids_(std::move(eos_token_ids)) {
  SPARK_CHECK(vocab_size > 0, "vocab_size must be positive");
  logits_.resize(static_cast<size_t>(vocab_size));
  probs_.resize(static_cast<size_t>(vocab_size));
  counts_.assign(static_cast<size_t>(vocab_size), 0);
  seen_.assign(static_cast<size_t>(vocab_size), 0);
}

SampleOutput Sampler::sample(const float* logits, const Sequence& seq) {
  return sample(logits, seq.params, seq.token_ids, seq.num_prompt_tokens, seq.seed,
                static_cast<uint64_t>(seq.num_output_tokens()), seq.matcher.get(), seq.max_tokens);
}

SampleOutput Sampler::sample(const float* logits, const SamplingParams& params, std::span<const int32_t> context,
                             int64_t num_prompt_tokens, uint64_t seed, uint64_t counter, constrain::Matcher* matcher,
                             int64_t max_output_tokens) {
  std::copy(logits, logits + vocab_size_, logits_.begin());
  if (!matcher) return sample_row(params, context, num_prompt_tokens, seed, counter, nullptr);
  const int64_t tokens_left = max_output_tokens > 0 ? std::max<int64_t>(1, max_output_tokens - int64_t(counter)) : 0;
  mask_seconds_.push_back(constraint_mask(*matcher, eos_ids_, params, tokens_left, allowed_));
  SampleOutput out = sample_row(params, context, num_prompt_tokens, seed, counter, &allowed_);
  advance_constraint(*matcher, eos_ids_, params, out.token);
  return out;
}

SampleOutput Sampler::sample(const float* logits, const SamplingParams& params, std::span<const int32_t> context,
                             int64_t num_prompt_tokens, uint64_t seed, uint64_t counter,
                             const std::vector<uint64_t>& allowed) {
  std::copy(logits, logits + vocab_size_, logits_.begin());
  return sample_row(params, context, num_prompt_tokens, seed, counter, &allowed);
}

// logits_ holds the row; `allowed` (a constraint's mask) goes first, as a grammar's
// refusal outranks every bias.
SampleOutput Sampler::sample_row(const SamplingParams& params, std::span<const int32_t> context,
                                 int64_t num_prompt_tokens, uint64_t seed, uint64_t counter,
                                 const std::vector<uint64_t>* allowed) {
  if (allowed) apply_mask(*allowed);
  adjust_logits(params, context, num_prompt_tokens);
  SampleOutput out;
  out.token = draw(params, params.greedy() ? 0.0 : uniform01(seed, counter));
  if (params.logprobs) fill_logprobs(params, out);
  return out;
}

void Sampler::adjust_logits(const SamplingParams& params, std::span<const int32_t> context, int64_t num_prompt_tokens) {
  for (const auto& [id, bias] : params.logit_bias) {
    SPARK_CHECK(id >= 0 && id < vocab_size_, "logit_bias token id not validated");
    logits_[id] += bias;
  }
  const int64_t num_output = static_cast<int64_t>(context.size()) - num_prompt_tokens;
  if (num_output < params.min_tokens) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    if (!params.ignore_eos)
      for (int32_t id : eos_ids_)
        if (id >= 0 && id < vocab_size_) logits_[id] = kNegInf;
    for (int32_t id : params.stop_token_ids) logits_[id] = kNegInf;
  }

  if (params.repetition_penalty != 1.0) {
    const float rep = static_cast<float>(params.repetition_penalty);
    for (int32_t id : context) {
      if (seen_[id]) continue;
      seen_[id] = 1;
      logits_[id] = logits_[id] > 0 ? logits_[id] / rep : logits_[id] * rep;
    }
    for (int32_t id : context) seen_[id] = 0;
  }
  if (params.presence_penalty != 0.0 || params.frequency_penalty != 0.0) {
    auto output = context.subspan(static_cast<size_t>(num_prompt_tokens));
    for (int32_t id : output) ++counts_[id];
    for (int32_t id : output) {
      if (counts_[id] == 0) continue;  // already applied for this id
      logits_[id] -= static_cast<float>(params.frequency_penalty * counts_[id] + params.presence_penalty);
      counts_[id] = 0;
    }
  }
}

int32_t Sampler::draw(const SamplingParams& params, double u) {
  const auto first = logits_.begin(), last = logits_.end();
  const auto argmax = static_cast<int32_t>(std::max_element(first, last) - first);  // first maximum: lowest id
  if (params.greedy() || !std::isfinite(logits_[argmax])) return argmax;

  const double inv_t = 1.0 / params.temperature;
  const float top = logits_[argmax];
  // Unnormalized probabilities relative to the most likely token (which gets 1).
  for (int64_t i = 0; i < vocab_size_; ++i) probs_[i] = static_cast<float>(std::exp((logits_[i] - top) * inv_t));
  if (params.min_p > 0)
    for (float& p : probs_)
      if (p < params.min_p) p = 0.0f;

  const bool top_k_on = params.top_k > 0 && params.top_k < vocab_size_;
  const bool top_p_on = params.top_p < 1.0;
  if (!top_k_on && !top_p_on) {  // no ordering needed: walk the CDF in id order
    double total = 0;
    for (float p : probs_) total += p;
    const double target = u * total;
    double acc = 0;
    int32_t last_nonzero = argmax;
    for (int64_t i = 0; i < vocab_size_; ++i) {
      if (probs_[i] == 0.0f) continue;
      acc += probs_[i];
      last_nonzero = static_cast<int32_t>(i);
      if (acc > target) return last_nonzero;
    }
    return last_nonzero;  // rounding left target at the very end
  }

  order_.clear();
  for (int32_t i = 0; i < static_cast<int32_t>(vocab_size_); ++i)
    if (probs_[i] > 0.0f) order_.push_back(i);
  auto more_likely = [&](int32_t a, int32_t b) { return probs_[a] != probs_[b] ? probs_[a] > probs_[b] : a < b; };
  if (top_k_on && static_cast<int64_t>(order_.size()) > params.top_k) {
    auto kth = order_.begin() + params.top_k;
    std::nth_element(order_.begin(), kth, order_.end(), more_likely);
    order_.erase(kth, order_.end());
  }
  std::sort(order_.begin(), order_.end(), more_likely);
  if (top_p_on) {
    double total = 0;
    for (int32_t id : order_) total += probs_[id];
    const double keep_mass = params.top_p * total;
    double cum = 0;
    size_t keep = 0;
    while (keep < order_.size()) {
      cum += probs_[order_[keep++]];
      if (cum >= keep_mass) break;
    }
    order_.resize(std::max<size_t>(keep, 1));
  }
  double total = 0;
  for (int32_t id : order_) total += probs_[id];
  const double target = u * total;
  double acc = 0;
  for (int32_t id : order_) {
    acc += probs_[id];
    if (acc > target) return id;
  }
  return order_.back();
}

void Sampler::fill_logprobs(const SamplingParams& params, SampleOutput& out) {
  const float top = *std::max_element(logits_.begin(), logits_.end());
  double sum = 0;
  for (float l : logits_) sum += std::exp(static_cast<double>(l) - top);
  const double lse = top + std::log(sum);
  auto logprob = [&](int32_t id) { return std::max(kLogprobFloor, static_cast<float>(logits_[id] - lse)); };
  out.logprob = logprob(out.token);
  if (params.top_logprobs <= 0) return;
  order_.resize(static_cast<size_t>(vocab_size_));
  std::iota(order_.begin(), order_.end(), 0);
  const auto n = std::min<int64_t>(params.top_logprobs, vocab_size_);
  std::partial_sort(order_.begin(), order_.begin() + n, order_.end(),
                    [&](int32_t a, int32_t b) { return logits_[a] != logits_[b] ? logits_[a] > logits_[b] : a < b; });
  for (int64_t i = 0; i < n; ++i) out.top_logprobs.emplace_back(order_[i], logprob(order_[i]));
}

}  // namespace spark
