// speculator.h — speculative decoding: which sequences get drafts in the next step and
// how many, the n-gram (prompt-lookup) drafts themselves, and the rule that turns a
// verified step's samples into accepted tokens. A draft model's drafts are filled in
// after the step is planned (engine/core/draft_model.h).
//
// A sequence with d drafts puts 1 + d rows in the step (its last token, then the drafts)
// and gets a sample for each: row i samples the token after context + drafts[0, i) as
// output token n + i, with the very draw uniform01(seed, n + i) that decoding without
// speculation would use there. Drafts are accepted while each equals its row's sample,
// and the first sample that differs (or the one after the last draft) is kept too. This
// is rejection sampling for a point-mass draft: a draft survives with probability p(d)
// = min(1, p(d)/q(d)), and when it does not, the sample is distributed as p without d,
// which is the residual norm(max(0, p - q)). So the output distribution is the model's,
// and a seeded request gives exactly the tokens it gives with speculation off. A draft
// model's drafts are such point masses too (each the draft's own draw, DraftModel).
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/core/ngram_index.h"
#include "engine/core/scheduler.h"
#include "engine/step/step.h"

namespace spark {

struct SpeculationConfig {
  int num_tokens = 0;  // most drafts per sequence and step; 0 = off
  int lookup_min = 2;  // n-gram lengths matched against earlier text
  int lookup_max = 4;
  // The drafts come from a draft model: propose plans how many, as placeholders that
  // DraftModel::draft replaces once the step's blocks are allocated.
  bool from_model = false;

  static SpeculationConfig from(const EngineConfig& e);
};

// How many drafts a verified row group accepted: the length of the prefix of `drafts`
// that equals sampled[0..]. sampled holds 1 + drafts.size() tokens, and the group appends
// sampled[0, accepted] to its sequence.
size_t accepted_drafts(std::span<const int32_t> drafts, const int32_t* sampled);

// The number of drafts, at most k_max, that makes the most tokens per unit of time when
// each draft holds with probability `acceptance` (given the ones before it held) and
// costs `cost` of a step without drafts (its draft model forward and its verification
// row): k drafts give (1 - a^(k+1)) / (1 - a) tokens in 1 + k * cost steps. 0 when no k
// beats decoding without.
int paying_drafts(double acceptance, double cost, int k_max);

// The sample rows verifying `drafts` after `tokens` (prompt + output so far): rows[i]
// samples output token (tokens.size() - num_prompt_tokens) + i after tokens + drafts[0, i).
// `context` receives tokens + drafts (when there are drafts) and must stay alive while
// the rows are used, as must `tokens`.
void verification_rows(const SamplingParams& params, std::span<const int32_t> tokens, int64_t num_prompt_tokens,
                       uint64_t seed, std::span<const int32_t> drafts, std::vector<int32_t>& context,
                       SampleRow* rows);

class Speculator {
 public:
  explicit Speculator(SpeculationConfig config);

  bool enabled() const { return config_.num_tokens > 0; }
  bool drafts_from_model() const { return enabled() && config_.from_model; }
  int64_t max_drafts() const { return config_.num_tokens; }

  // Sets seq->draft_tokens for the scheduler's next step: a decoding sequence that may
  // speculate (not opted out, room under max_tokens) gets up to its current k drafts (a
  // draft model's: exactly k placeholders), while the step's rows stay within `row_budget`
  // (the rows the executor runs at about the cost of one: past that the step is
  // compute-bound and drafts would slow everyone). Every other sequence gets none.
  void propose(const Scheduler& scheduler, int64_t row_budget);

  // A step verified `drafted` drafts of `seq` and accepted `accepted` of them: a sequence
  // whose drafts keep failing drafts fewer (down to none for a while), one whose drafts
  // hold drafts more.
  void observe(const Sequence& seq, size_t drafted, size_t accepted);

  // A draft model's drafts cost its forwards and the verification rows. The engine reports
  // every decode-only step: its sequences, the drafts it verified, and its time from the
  // first draft forward to the step's end. Steps without drafts give the time of a plain
  // step at that batch size (with a draft model, one in kPlainEvery steps is kept plain
  // for it); steps with drafts, what a draft costs beyond it. With that cost, a sequence
  // drafts only as many tokens as pay for themselves at its acceptance (paying_drafts),
  // and none for the rest of its life when none do: it would have to catch the draft up
  // on everything it wrote meanwhile to try again. A cost not measured for a while is
  // forgotten (the load changes it), so that new sequences measure again.
  void observe_step(int64_t seqs, int64_t drafts, double seconds);

  void retire(int64_t seq_id) { states_.erase(seq_id); }
  void forget_all() { states_.clear(); }
  int current_k(int64_t seq_id) const;  // tests

 private:
  struct State {
    NgramIndex index;
    int k;
    int64_t paused_until = 0;  // k is 0: the token count at which one draft is tried again
    double acceptance;         // a draft's chance to hold, averaged over its recent drafts
  };
  State& state_of(const Sequence& seq);

  SpeculationConfig config_;
  std::unordered_map<int64_t, State> states_;
  double draft_cost_ = 0;  // a draft over a plain step, averaged; 0: not measured, or lookup drafts
  int64_t proposals_since_cost_ = 0;
  int64_t proposals_ = 0;
  bool plain_due_ = true;  // a draft model: the next decode-only step makes no drafts
  // A plain decode step's seconds by batch size (bucket log2 of the sequences), averaged;
  // 0: not measured.
  std::array<double, 16> plain_seconds_{};
};

}  // namespace spark
