// pipeline_executor.cpp — first-stage forward, micro-batch plans with their opens and
// closes, and the pairing's lifetime as the engine sees it.
#include "engine/peer/pipeline_executor.h"

#include <algorithm>

#include "engine/constrain/matcher.h"
#include "engine/core/sampler.h"
#include "engine/peer/link.h"
#include "engine/peer/messages.h"
#include "engine/util/check.h"

namespace spark {

PipelineExecutor::PipelineExecutor(std::unique_ptr<Backend> backend, RemoteStage& remote, int64_t hidden_size,
                                   int64_t vocab_size)
    : backend_(std::move(backend)), remote_(remote), hidden_size_(hidden_size), vocab_size_(vocab_size) {
  SPARK_CHECK(backend_ != nullptr, "a pipeline needs the first stage's backend");
  if (remote_.takes_device_hidden()) require_nccl_backend(*backend_);
}

void PipelineExecutor::prepare(int64_t num_kv_blocks, int64_t num_window_blocks, int64_t block_size,
                               const std::vector<int32_t>& eos_token_ids, int64_t num_state_slots) {
  // The worker sizes its cache and state slots from the session (Welcome::window_blocks,
  // state_slots) and runs each plan's block copies and states on its own layers, as this
  // stage's backend does on these.
  backend_->init_windowed_kv_cache(num_kv_blocks, num_window_blocks, block_size);
  backend_->init_state_slots(num_state_slots);
  backend_->warm_up();
  eos_ids_ = eos_token_ids;  // the masks' end-of-sequence ids (the worker samples with the same set)
}

StepExecutor::Readiness PipelineExecutor::readiness() {
  Readiness r;
  const uint64_t session = remote_.session();
  if (session != session_) {
    // A new pairing (or none): the old worker's KV and sequences are gone, so every
    // request that ran there fails, and no cached prefix may be trusted any more.
    // Requests not yet sent anywhere simply run on the new pairing.
    r.state_lost = true;
    if (!in_flight_.empty() || !opened_.empty())
      r.lost_why = session == 0 ? remote_.problem() : "the peer worker re-paired";
    forget_all();
    session_ = session;
  }
  r.ready = session != 0;
  return r;
}

void PipelineExecutor::launch(const ScheduledStep& step) {
  const int64_t start_us = wall_us();
  // A link that moves device memory takes the 16-bit hidden states where the layers left
  // them; otherwise they come to the host as f32.
  StageHidden hidden;
  const size_t values = size_t(step.batch.num_tokens()) * size_t(hidden_size_);
  if (remote_.takes_device_hidden() && backend_->boundary_on_device()) {
    hidden.device = backend_->forward_to_boundary(step.batch);
    SPARK_CHECK(hidden.device.count == values, "a first pipeline stage returns hidden states for every row");
  } else {
    backend_->forward(step.batch, nullptr, result_);
    SPARK_CHECK(result_.hidden.size() == values, "a first pipeline stage returns hidden states for every row");
    hidden.host = result_.hidden;
  }
  const int64_t end_us = wall_us();

  MicroBatchPlan mb;
  mb.id = next_plan_id_++;
  mb.closes.swap(pending_closes_);
  mb.sample_seq_ids.assign(step.batch.logits_rows.size(), 0);
  Sent sent{mb.id, step.batch.logits_rows.size(), step.batch.hidden_rows.size() * size_t(hidden_size_), {}};
  for (const StepEntry& e : step.entries) {
    const Sequence& seq = *e.seq;
    if (opened_.insert(seq.seq_id).second)
      mb.opens.push_back({seq.seq_id, seq.num_prompt_tokens, seq.seed, seq.params, seq.token_ids});
    // A sequence verifying drafts samples at 1 + d consecutive rows; the worker reads its
    // drafts from the batch and decides which it accepts by the same rule as the engine.
    for (int64_t j = 0; e.logits_row >= 0 && j <= e.num_draft_tokens; ++j)
      mb.sample_seq_ids[size_t(e.logits_row + j)] = seq.seq_id;
    if (seq.matcher && e.logits_row >= 0) add_masks(seq, size_t(e.logits_row), e.num_draft_tokens, mb, sent);
  }
  report_mask_times(mask_seconds_);
  mb.batch = step.batch;
  in_flight_.push_back(std::move(sent));
  remote_.send(session_, mb, hidden, start_us, end_us);
}

// The masks of a constrained sequence's rows: its matcher's now, and for each draft it
// verifies, the mask after the drafts before it (on a copy: the drafts may not hold).
void PipelineExecutor::add_masks(const Sequence& seq, size_t first_row, int64_t num_drafts, MicroBatchPlan& mb,
                                 Sent& sent) {
  mb.row_masks.resize(mb.sample_seq_ids.size());
  std::unique_ptr<constrain::Matcher> ahead;
  constrain::Matcher* m = seq.matcher.get();
  for (int64_t j = 0; j <= num_drafts; ++j) {
    const int64_t counter = seq.num_output_tokens() + j;
    const int64_t tokens_left = seq.max_tokens > 0 ? std::max<int64_t>(1, seq.max_tokens - counter) : 0;
    std::vector<uint64_t>& mask = mb.row_masks[first_row + size_t(j)];
    mask_seconds_.push_back(constraint_mask(*m, eos_ids_, seq.params, tokens_left, mask));
    mask.resize(size_t(mask_words(vocab_size_)), 0);
    if (j == num_drafts) break;
    if (!ahead) {
      ahead = std::make_unique<constrain::Matcher>(*seq.matcher);
      m = ahead.get();
    }
    advance_constraint(*m, eos_ids_, seq.params, seq.draft_tokens[size_t(j)]);
  }
  sent.constrained.push_back({seq.matcher, seq.params, first_row, seq.draft_tokens});
}

StepOutput PipelineExecutor::finish_oldest() {
  SPARK_CHECK(!in_flight_.empty(), "finish_oldest without a micro-batch in flight");
  const Sent sent = std::move(in_flight_.front());
  in_flight_.pop_front();
  StepOutput out = std::move(remote_.receive(sent.id, sent.rows, sent.hidden_values).output);
  const std::vector<SampleOutput>& samples = out.samples;
  // Each matcher steps by the samples its sequence keeps: up to and including the first
  // that differs from its draft (speculator.h's rule, which the worker applies too).
  for (const ConstrainedRows& c : sent.constrained)
    for (size_t j = 0; j <= c.drafts.size() && c.first_row + j < samples.size(); ++j) {
      const int32_t token = samples[c.first_row + j].token;
      advance_constraint(*c.matcher, eos_ids_, c.params, token);
      if (j == c.drafts.size() || token != c.drafts[j]) break;
    }
  return out;
}

void PipelineExecutor::retire(int64_t seq_id) {
  if (opened_.erase(seq_id)) pending_closes_.push_back(seq_id);
}

void PipelineExecutor::forget_all() {
  opened_.clear();
  pending_closes_.clear();
  in_flight_.clear();
}

}  // namespace spark
