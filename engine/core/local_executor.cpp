// local_executor.cpp — forward and sample on this box.
#include "engine/core/local_executor.h"

#include <algorithm>

#include "engine/core/speculator.h"
#include "engine/util/check.h"

namespace spark {

LocalExecutor::LocalExecutor(std::unique_ptr<Backend> backend, int64_t vocab_size)
    : backend_(std::move(backend)), vocab_size_(vocab_size) {
  SPARK_CHECK(backend_ != nullptr, "a local executor needs a backend");
}

void LocalExecutor::prepare(int64_t num_kv_blocks, int64_t num_window_blocks, int64_t block_size,
                            const std::vector<int32_t>& eos_token_ids, int64_t num_state_slots) {
  backend_->init_windowed_kv_cache(num_kv_blocks, num_window_blocks, block_size);
  backend_->init_state_slots(num_state_slots);
  backend_->warm_up();
  sampler_.emplace(vocab_size_, eos_token_ids);
}

void LocalExecutor::launch(const ScheduledStep& step) {
  const size_t rows = step.batch.logits_rows.size();
  StepOutput out;
  std::vector<SampleOutput>& samples = out.samples;
  samples.resize(rows);
  // What each logits row samples: one row per sequence, and one more per draft it verifies.
  std::vector<SampleRow> requests(rows);
  contexts_.resize(std::max(contexts_.size(), step.entries.size()));
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const StepEntry& e = step.entries[i];
    if (e.logits_row < 0) continue;
    const Sequence& seq = *e.seq;
    verification_rows(seq.params, seq.token_ids, seq.num_prompt_tokens, seq.seed, seq.draft_tokens, contexts_[i],
                      &requests[size_t(e.logits_row)]);
  }
  // A structured-output row is masked by its grammar on the host: a step with one returns
  // logits and samples here.
  const bool constrained =
      std::any_of(step.entries.begin(), step.entries.end(), [](const StepEntry& e) { return e.seq->matcher != nullptr; });
  if (backend_->samples_on_device() && !constrained) {
    backend_->forward_sample(step.batch, nullptr, requests, out);
    done_.push_back(std::move(out));
    return;
  }
  backend_->forward(step.batch, nullptr, result_);
  const auto vocab = static_cast<size_t>(vocab_size_);
  if (result_.logits.size() != rows * vocab)
    throw RuntimeError("the backend returned " + std::to_string(result_.logits.size()) + " logits, expected " +
                       std::to_string(rows) + " rows x " + std::to_string(vocab));
  for (const StepEntry& e : step.entries)
    for (int64_t j = 0; e.logits_row >= 0 && j <= e.num_draft_tokens; ++j) {
      const size_t r = size_t(e.logits_row + j);
      const SampleRow& q = requests[r];
      samples[r] = sampler_->sample(result_.logits.data() + r * vocab, *q.params, q.context, q.num_prompt_tokens, q.seed,
                                    q.counter, e.seq->matcher.get(), e.seq->max_tokens);
      // A sequence's matcher steps on each row's sample, which is its draft while drafts
      // hold: the rows after the first sample that differs verify text that is thrown away
      // (speculator.h), so a constrained sequence stops there, its matcher on the kept text.
      if (e.seq->matcher && j < e.num_draft_tokens && samples[r].token != e.seq->draft_tokens[size_t(j)]) break;
    }
  report_mask_times(sampler_->mask_seconds());
  out.hidden = std::move(result_.final_hidden);
  done_.push_back(std::move(out));
}

StepOutput LocalExecutor::finish_oldest() {
  SPARK_CHECK(!done_.empty(), "finish_oldest without a launched step");
  StepOutput out = std::move(done_.front());
  done_.pop_front();
  return out;
}

}  // namespace spark
