// sampler_constraint.cpp — structured output in the sampler: the grammar's token mask
// (computed where the matcher lives) applied to a logits row (where the row is sampled),
// and the matcher's step by the drawn token.
#include <algorithm>
#include <chrono>
#include <limits>

#include "engine/constrain/matcher.h"
#include "engine/core/sampler.h"

namespace spark {

double constraint_mask(constrain::Matcher& matcher, std::span<const int32_t> eos_ids, const SamplingParams& params,
                       int64_t tokens_left, std::vector<uint64_t>& mask) {
  const auto start = std::chrono::steady_clock::now();
  // End-of-sequence (and the request's stop tokens) are allowed exactly where the value is
  // complete; they are never in the grammar's mask (special tokens), so they are added.
  std::vector<int32_t> enders;
  for (int32_t id : eos_ids)
    if (id >= 0) enders.push_back(id);
  for (int32_t id : params.stop_token_ids) enders.push_back(id);
  size_t words = 0;
  for (int32_t id : enders) words = std::max(words, size_t(id) / 64 + 1);

  // With n tokens left, this one and n - 1 more must complete the value: an output the
  // limit would cut closes its value instead (its finish reason stays "length").
  const uint32_t finish_within = tokens_left > 0 && tokens_left - 1 < int64_t(constrain::Matcher::kNoLimit)
                                     ? uint32_t(tokens_left - 1)
                                     : constrain::Matcher::kNoLimit;
  matcher.fill_mask(mask, finish_within);
  auto any_allowed = [&] { return std::any_of(mask.begin(), mask.end(), [](uint64_t w) { return w != 0; }); };
  // A budget below what the value needs at a byte per token leaves no token: the value
  // goes on unbudgeted (its tokens may still finish it in time) rather than end cut short
  // by an end-of-sequence that would claim it complete.
  if (finish_within != constrain::Matcher::kNoLimit && !any_allowed()) matcher.fill_mask(mask);
  // Where the grammar allows nothing the vocabulary can spell, ending is the way out.
  const bool may_end = matcher.accepting() || !any_allowed();
  if (mask.size() < words) mask.resize(words, 0);
  for (int32_t id : enders) {
    const uint64_t bit = uint64_t(1) << (id % 64);
    mask[size_t(id) / 64] = may_end ? mask[size_t(id) / 64] | bit : mask[size_t(id) / 64] & ~bit;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Sampler::apply_mask(const std::vector<uint64_t>& allowed) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w * 64 < vocab_size_; ++w) {
    const uint64_t bits = size_t(w) < allowed.size() ? allowed[size_t(w)] : 0;
    if (bits == ~uint64_t(0)) continue;
    for (int64_t id = w * 64; id < std::min(vocab_size_, w * 64 + 64); ++id)
      if (!((bits >> (id % 64)) & 1)) logits_[size_t(id)] = kNegInf;
  }
}

void advance_constraint(constrain::Matcher& matcher, std::span<const int32_t> eos_ids, const SamplingParams& params,
                        int32_t token) {
  if (std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end()) return;
  if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) != params.stop_token_ids.end()) return;
  // Only a request that contradicts its own constraint (min_tokens past the end of the
  // value masks the end-of-sequence token the grammar left as the only choice) draws a
  // token outside the mask; the matcher then stays where it was.
  matcher.advance(token);
}

}  // namespace spark
