// draft_model.cpp — the draft model's catch-up and draft rows, and what its KV holds.
#include "engine/core/draft_model.h"

#include <algorithm>

#include "engine/util/check.h"

namespace spark {

void require_same_vocabulary(const Tokenizer& model, const Tokenizer& draft) {
  if (draft.vocab_size() > model.vocab_size())
    throw InputError("the draft model's tokenizer has " + std::to_string(draft.vocab_size()) + " tokens, the model's " +
                     std::to_string(model.vocab_size()) + ": a draft model needs the model's tokenizer");
  for (int32_t id = 0; id < draft.vocab_size(); ++id)
    if (draft.token_text(id) != model.token_text(id))
      throw InputError("the draft model's tokenizer differs from the model's: token " + std::to_string(id) + " is \"" +
                       draft.token_text(id) + "\" there and \"" + model.token_text(id) +
                       "\" here; a draft model needs the model's tokenizer");
}

DraftModel::DraftModel(std::unique_ptr<Backend> backend, const ModelSpec& spec, int64_t max_step_tokens)
    : backend_(std::move(backend)),
      vocab_size_(spec.vocab_size),
      recurrent_(spec.has_recurrent_layers()),
      max_step_tokens_(max_step_tokens) {
  SPARK_CHECK(backend_ != nullptr && vocab_size_ > 0 && max_step_tokens_ > 0, "a draft model needs a backend and a budget");
}

void DraftModel::prepare(int64_t num_kv_blocks, int64_t block_size, int64_t max_running,
                         const std::vector<int32_t>& eos_token_ids) {
  // A draft may have fewer ids than the model (its vocabulary padded less): ids it lacks
  // are left out of what it samples with.
  std::vector<int32_t> eos;
  for (const int32_t id : eos_token_ids)
    if (id < vocab_size_) eos.push_back(id);
  sampler_.emplace(vocab_size_, eos);
  backend_->init_kv_cache(num_kv_blocks, block_size);
  block_size_ = block_size;
  max_running_ = max_running;
  if (recurrent_) backend_->init_state_slots(2 * max_running);
  forget_all();
}

void DraftModel::retire(int64_t seq_id) {
  const auto it = held_.find(seq_id);
  if (it == held_.end()) return;
  if (it->second.slot >= 0) free_slots_.push_back(it->second.slot);
  held_.erase(it);
}

void DraftModel::forget_all() {
  held_.clear();
  free_slots_.clear();
  if (recurrent_)
    for (auto s = int32_t(max_running_); s-- > 0;) free_slots_.push_back(s);
}

void DraftModel::resume(Job& job) {
  const Sequence& seq = *job.seq;
  job.computed = 0;
  Held& h = held_[seq.seq_id];
  if (recurrent_ && h.slot < 0) {
    SPARK_CHECK(!free_slots_.empty(), "more drafting sequences than the draft model has state slots for");
    h.slot = free_slots_.back();
    free_slots_.pop_back();
  }
  job.slot = h.slot;
  if (!h.params) {
    SamplingParams& p = h.params.emplace(seq.params);
    p.logprobs = false;
    p.top_logprobs = 0;
    std::erase_if(p.logit_bias, [this](const auto& bias) { return bias.first >= vocab_size_; });
    std::erase_if(p.stop_token_ids, [this](int32_t id) { return id >= vocab_size_; });
  }
  job.params = &*h.params;
  if (h.preemptions != seq.num_preemptions) return;
  int64_t n = std::min(h.tokens, seq.num_tokens());
  for (const int32_t d : h.drafts) {  // the drafts held that the sequence accepted
    if (n >= seq.num_tokens() || seq.token_ids[size_t(n)] != d) break;
    ++n;
  }
  // K and V written into a block the sequence no longer has are not its.
  for (int64_t b = 0; b * block_size_ < n; ++b)
    if (size_t(b) >= h.blocks.size() || size_t(b) >= seq.block_table.size() || h.blocks[size_t(b)] != seq.block_table[size_t(b)]) {
      n = b * block_size_;
      break;
    }
  // The last token's row is run again in any case: its logits give the first draft.
  n = std::min(n, seq.num_tokens() - 1);
  if (!recurrent_) {
    job.computed = n;
    return;
  }
  // A state holds every token it took in: it goes on where it stands, or back to the
  // snapshot of the sequence's tokens, or it starts over.
  const int64_t state_at = h.tokens + int64_t(h.drafts.size());
  if (n == state_at) {
    job.computed = n;
  } else if (!h.drafts.empty() && n >= h.tokens) {
    job.computed = h.tokens;
    job.restore = true;
  }
}

void DraftModel::draft(ScheduledStep& step) {
  std::vector<Job> jobs;
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const StepEntry& e = step.entries[i];
    if (e.num_draft_tokens == 0 || e.logits_row < 0) continue;
    Job& j = jobs.emplace_back();
    j.seq = e.seq;
    j.entry = i;
    j.wanted = e.num_draft_tokens;
    resume(j);
    const SamplingParams& p = *j.params;
    if (p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 || p.min_tokens > 0)
      j.context = e.seq->token_ids;
  }
  max_catch_up_ = 0;
  for (const Job& j : jobs) max_catch_up_ = std::max(max_catch_up_, j.seq->num_tokens() - j.computed);
  std::vector<Job*> pending;
  for (Job& j : jobs) pending.push_back(&j);
  while (!pending.empty()) {
    forward(pending);
    std::erase_if(pending, [](const Job* j) { return int64_t(j->drafts.size()) == j->wanted; });
  }
  for (Job& j : jobs) {
    Sequence& seq = *step.entries[j.entry].seq;
    seq.draft_tokens = j.drafts;
    // The entry's last rows are its last token, then the drafts.
    const int32_t end = step.batch.query_start[j.entry + 1];
    std::copy(seq.draft_tokens.begin(), seq.draft_tokens.end(),
              step.batch.token_ids.begin() + std::ptrdiff_t(end - j.wanted));
    // Every draft but the last has its K and V in the draft's cache.
    Held& h = held_.at(seq.seq_id);
    h.tokens = seq.num_tokens();
    h.drafts.assign(j.drafts.begin(), j.drafts.end() - 1);
    h.blocks = seq.block_table;
    h.preemptions = seq.num_preemptions;
  }
}

void DraftModel::forward(std::vector<Job*>& jobs) {
  Batch& b = batch_;
  b = Batch{};
  size_t max_blocks = 0;
  for (const Job* j : jobs) max_blocks = std::max(max_blocks, j->seq->block_table.size());
  b.max_blocks_per_seq = static_cast<int32_t>(max_blocks);
  b.query_start.push_back(0);
  std::vector<Job*> sampled;  // the jobs whose last row has logits, in row order
  int64_t budget = max_step_tokens_;
  for (Job* j : jobs) {
    if (budget == 0) break;
    const Sequence& seq = *j->seq;
    const int64_t end = std::min(j->known(), j->computed + budget);
    if (j->slot >= 0) {
      b.state_slots.push_back(j->slot);
      const auto snapshot = static_cast<int32_t>(j->slot + max_running_);
      if (j->restore) b.state_copies.insert(b.state_copies.end(), {snapshot, j->slot});
      // The state holds exactly the sequence's tokens before its first draft row.
      if (j->computed == j->seq->num_tokens()) b.state_copies.insert(b.state_copies.end(), {j->slot, snapshot});
      j->restore = false;
    }
    for (int64_t pos = j->computed; pos < end; ++pos) {
      b.token_ids.push_back(j->token_at(pos));
      b.positions.push_back(static_cast<int32_t>(pos));
      b.slot_mapping.push_back(static_cast<int32_t>(seq.block_table[size_t(pos / block_size_)] * block_size_ + pos % block_size_));
    }
    budget -= end - j->computed;
    j->computed = end;
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(static_cast<int32_t>(end));
    b.block_tables.insert(b.block_tables.end(), seq.block_table.begin(), seq.block_table.end());
    b.block_tables.resize(b.block_tables.size() + (max_blocks - seq.block_table.size()), 0);
    if (end == j->known()) {
      b.logits_rows.push_back(b.num_tokens() - 1);
      sampled.push_back(j);
    }
  }
  if (sampled.empty()) {  // a long catch-up filled the whole step
    backend_->forward(b, nullptr, result_);
    ++forwards_;
    return;
  }
  // Draft i of a sequence is drawn as the model draws output token n + i, n being the
  // sequence's next output index (speculator.h: verification_rows).
  std::vector<SampleRow> rows;
  for (const Job* j : sampled) {
    const Sequence& seq = *j->seq;
    const auto counter = uint64_t(seq.num_output_tokens() + int64_t(j->drafts.size()));
    rows.push_back({j->params, j->context.empty() ? std::span<const int32_t>(seq.token_ids) : j->context,
                    seq.num_prompt_tokens, seq.seed, counter});
  }
  std::vector<int32_t> tokens(sampled.size());
  if (backend_->samples_on_device()) {
    backend_->forward_sample(b, nullptr, rows, samples_);
    for (size_t r = 0; r < sampled.size(); ++r) tokens[r] = samples_.samples[r].token;
  } else {
    backend_->forward(b, nullptr, result_);
    const auto vocab = static_cast<size_t>(vocab_size_);
    SPARK_CHECK(result_.logits.size() == sampled.size() * vocab, "the draft model returned the wrong number of logits");
    for (size_t r = 0; r < sampled.size(); ++r) {
      const SampleRow& q = rows[r];
      tokens[r] = sampler_->sample(result_.logits.data() + r * vocab, *q.params, q.context, q.num_prompt_tokens, q.seed,
                                   q.counter).token;
    }
  }
  ++forwards_;
  for (size_t r = 0; r < sampled.size(); ++r) {
    Job& j = *sampled[r];
    j.drafts.push_back(tokens[r]);
    if (!j.context.empty()) j.context.push_back(tokens[r]);
  }
}

}  // namespace spark
