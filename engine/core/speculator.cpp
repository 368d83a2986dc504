// speculator.cpp — draft proposal, per-sequence adaptation, and the acceptance rule.
#include "engine/core/speculator.h"

#include <algorithm>
#include <bit>

#include "engine/util/check.h"

namespace spark {

namespace {

// A sequence whose k fell to 0 tries one draft again after this many tokens: text turns
// repetitive (a quoted block, a list) after starting not to be.
constexpr int64_t kPauseTokens = 32;
// A new sequence's acceptance before its drafts are seen, and the weight of each draft's
// outcome in the running average.
constexpr double kPriorAcceptance = 0.7;
constexpr double kAcceptanceWeight = 0.1;
constexpr double kCostWeight = 0.1;
// Proposals after which a draft cost that was not measured again is forgotten.
constexpr int64_t kCostLifetime = 1024;
// With a draft model, one decode step in this many makes no drafts, to time a plain step.
constexpr int64_t kPlainEvery = 64;

size_t batch_bucket(int64_t seqs) {
  return std::min<size_t>(15, size_t(std::bit_width(uint64_t(std::max<int64_t>(seqs, 1)))) - 1);
}

// A running average of timings; 0 stands for none yet, so the first sample sets it.
void add_sample(double& average, double sample) {
  average = average > 0 ? average + kCostWeight * (sample - average) : sample;
}

}  // namespace

SpeculationConfig SpeculationConfig::from(const EngineConfig& e) {
  SpeculationConfig c;
  c.num_tokens = e.speculates() ? int(e.num_speculative_tokens) : 0;
  c.lookup_min = int(e.prompt_lookup_min);
  c.lookup_max = int(e.prompt_lookup_max);
  c.from_model = e.drafts_from_model();
  return c;
}

size_t accepted_drafts(std::span<const int32_t> drafts, const int32_t* sampled) {
  size_t a = 0;
  while (a < drafts.size() && sampled[a] == drafts[a]) ++a;
  return a;
}

void verification_rows(const SamplingParams& params, std::span<const int32_t> tokens, int64_t num_prompt_tokens,
                       uint64_t seed, std::span<const int32_t> drafts, std::vector<int32_t>& context,
                       SampleRow* rows) {
  const auto counter = uint64_t(int64_t(tokens.size()) - num_prompt_tokens);
  if (drafts.empty()) {  // a plain decode row: no copy of the context
    rows[0] = {&params, tokens, num_prompt_tokens, seed, counter};
    return;
  }
  context.assign(tokens.begin(), tokens.end());
  context.insert(context.end(), drafts.begin(), drafts.end());
  for (size_t i = 0; i <= drafts.size(); ++i)
    rows[i] = {&params, std::span<const int32_t>(context.data(), tokens.size() + i), num_prompt_tokens, seed,
               counter + i};
}

int paying_drafts(double acceptance, double cost, int k_max) {
  int best = 0;
  double best_rate = 1.0, tokens = 1.0, held = 1.0;
  for (int k = 1; k <= k_max; ++k) {
    held *= acceptance;
    tokens += held;
    const double rate = tokens / (1.0 + k * cost);
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

Speculator::Speculator(SpeculationConfig config) : config_(config) {
  SPARK_CHECK(config_.num_tokens >= 0, "num_speculative_tokens must not be negative");
  if (enabled())
    SPARK_CHECK(config_.lookup_min >= 1 && config_.lookup_min <= config_.lookup_max, "prompt lookup lengths out of order");
}

Speculator::State& Speculator::state_of(const Sequence& seq) {
  auto it = states_.find(seq.seq_id);
  if (it == states_.end())
    it = states_
             .emplace(seq.seq_id, State{NgramIndex(config_.lookup_min, config_.lookup_max), config_.num_tokens, 0,
                                        kPriorAcceptance})
             .first;
  return it->second;
}

int Speculator::current_k(int64_t seq_id) const {
  auto it = states_.find(seq_id);
  return it == states_.end() ? config_.num_tokens : it->second.k;
}

void Speculator::propose(const Scheduler& scheduler, int64_t row_budget) {
  const auto& running = scheduler.running();
  for (Sequence* seq : running) seq->draft_tokens.clear();
  if (!enabled()) return;
  if (draft_cost_ > 0 && ++proposals_since_cost_ > kCostLifetime) draft_cost_ = 0;
  if (config_.from_model) {
    if (++proposals_ % kPlainEvery == 0) plain_due_ = true;
    // A plain step is timed on a decode-only step: every running sequence decodes.
    const bool decode_only = scheduler.waiting().empty() && !running.empty() &&
                             std::all_of(running.begin(), running.end(),
                                         [](const Sequence* s) { return s->num_uncomputed_tokens() == 1; });
    if (plain_due_ && decode_only) {
      plain_due_ = false;
      return;
    }
  }
  // The rows the step will hold without drafts: every running sequence's uncomputed
  // tokens, and the prompts that may be admitted, within the step's token budget.
  int64_t rows = 0;
  for (const Sequence* seq : running) rows += seq->num_uncomputed_tokens();
  for (const Sequence* seq : scheduler.waiting()) rows += seq->num_tokens() - seq->num_computed_tokens;
  const SchedulerConfig& c = scheduler.config();
  rows = std::min(rows, c.max_num_batched_tokens);
  // Each draft is a logits row too. Every sequence in the step has at least one row in
  // `rows`, so a step with drafts has at most row_budget logits rows: backends size their
  // logits for max(max_num_seqs, rows_at_decode_cost()) rows, not max_num_seqs alone
  // (which would leave no drafts at all at max_num_seqs = 1, the batch-1 case).
  int64_t budget = std::min(row_budget, c.max_num_batched_tokens) - rows;
  for (Sequence* seq : running) {
    if (budget <= 0) break;
    // A tool call opened inside accepted drafts would leave the drafts after it unmasked.
    if (seq->num_uncomputed_tokens() != 1 || !seq->params.speculative || seq->tool_watch) continue;
    // Every accepted draft is an output token: 1 + d of them must fit under max_tokens.
    const int64_t room = seq->max_tokens - seq->num_output_tokens() - 1;
    if (room <= 0) continue;
    State& st = state_of(*seq);
    if (st.k == 0) {
      if (seq->num_tokens() < st.paused_until) continue;
      st.k = 1;
    }
    int k = int(std::min<int64_t>({st.k, room, budget}));
    if (draft_cost_ > 0) {
      k = std::min(k, paying_drafts(st.acceptance, draft_cost_, config_.num_tokens));
      if (k == 0) {
        st.k = 0;
        st.paused_until = INT64_MAX;
        seq->no_more_drafts = true;
        continue;
      }
    }
    if (config_.from_model) {
      seq->draft_tokens.assign(size_t(k), seq->last_token());
    } else {
      st.index.extend(seq->token_ids);
      seq->draft_tokens = st.index.propose(seq->token_ids, k);
    }
    budget -= int64_t(seq->draft_tokens.size());
  }
}

void Speculator::observe_step(int64_t seqs, int64_t drafts, double seconds) {
  if (!config_.from_model || seqs <= 0 || !(seconds > 0)) return;
  double& plain = plain_seconds_[batch_bucket(seqs)];
  if (drafts == 0) {
    add_sample(plain, seconds);
    return;
  }
  if (plain == 0) return;
  // Per draft a sequence made, what the step cost beyond a plain one; never quite free.
  const double cost = std::max(0.001, (seconds - plain) / plain * double(seqs) / double(drafts));
  proposals_since_cost_ = 0;
  add_sample(draft_cost_, cost);
}

void Speculator::observe(const Sequence& seq, size_t drafted, size_t accepted) {
  if (drafted == 0) return;
  State& st = state_of(seq);
  // Each held draft is a success, the first that failed (if one did) a failure; the
  // drafts after it were never tried.
  for (size_t i = 0; i < accepted; ++i) st.acceptance += kAcceptanceWeight * (1.0 - st.acceptance);
  if (accepted < drafted) st.acceptance -= kAcceptanceWeight * st.acceptance;
  if (accepted == drafted) {
    st.k = std::min(st.k + 1, config_.num_tokens);
  } else if (accepted == 0) {
    st.k /= 2;
    if (st.k == 0) st.paused_until = seq.num_tokens() + kPauseTokens;
  } else {
    st.k = int(accepted) + 1;
  }
}

}  // namespace spark
