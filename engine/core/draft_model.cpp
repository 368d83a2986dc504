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
      hidden_size_(spec.is_assistant() ? spec.assistant_of_hidden : spec.hidden_size),
      recurrent_(spec.has_recurrent_layers()),
      mtp_(spec.mtp_head || spec.is_assistant()),
      assistant_(spec.is_assistant()),
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
  backend_->warm_up();
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

int64_t DraftModel::Job::row_end(int64_t H) const {
  if (!mtp) return known();
  const int64_t available = held->hidden_end(H);
  return available < seq->num_tokens() - 1 ? available : rows();
}

const float* DraftModel::row_hidden(const Job& job, int64_t row) const {
  if (row >= job.seq->num_tokens() - 1) return job.head_hidden.data();  // a draft row: the head's, a row before
  const Held& h = *job.held;
  SPARK_CHECK(row >= h.hidden_from && row < h.hidden_end(hidden_size_), "an MTP row without the model's hidden state");
  return h.hidden.data() + size_t(row - h.hidden_from) * size_t(hidden_size_);
}

DraftModel::Held& DraftModel::held_of(const Sequence& seq) {
  Held& h = held_[seq.seq_id];
  if (mtp_ && h.preemptions != seq.num_preemptions) {
    // Its blocks went, and the head's K and V with them: it starts over on the hidden
    // states the model's recomputation gives.
    h = Held{.slot = h.slot, .params = h.params};
    h.preemptions = seq.num_preemptions;
  }
  return h;
}

void DraftModel::resume(Job& job) {
  const Sequence& seq = *job.seq;
  job.computed = 0;
  job.mtp = mtp_;
  Held& h = held_of(seq);
  job.held = &h;
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
  // Rows of the sequence's own tokens (an MTP head's read the model's hidden states).
  const int64_t token_rows = seq.num_tokens() - (mtp_ ? 1 : 0);
  int64_t n = 0;
  if (h.preemptions == seq.num_preemptions) {
    n = std::min(h.tokens, token_rows);
    for (const int32_t d : h.drafts) {  // the drafts held that the sequence accepted
      if (n >= seq.num_tokens() || seq.token_ids[size_t(n)] != d) break;
      ++n;
    }
    // K and V written into a block the sequence no longer has are not its.
    for (int64_t b = 0; b * block_size_ < n; ++b)
      if (size_t(b) >= h.blocks.size() || size_t(b) >= seq.block_table.size() ||
          h.blocks[size_t(b)] != seq.block_table[size_t(b)]) {
        n = b * block_size_;
        break;
      }
  }
  // The last row of the sequence's tokens is run again in any case: its logits give the
  // first draft.
  if (job.wanted > 0) n = std::min(n, token_rows - 1);
  if (assistant_) {
    // No K and V of its own: only draft rows, the first needing the model's hidden state at
    // the sequence's second-to-last position.
    job.computed = token_rows - 1;
    if (job.wanted > 0 && !(token_rows > 0 && h.hidden_from <= token_rows - 1 && h.hidden_end(hidden_size_) >= token_rows))
      job.wanted = 0;
    return;
  }
  if (mtp_) {
    // Rows before the first hidden state the model gave are in prefix-cached blocks: their
    // K and V are the head's as the sequence that filled them wrote them.
    job.computed = std::max(n, std::min(h.hidden_from, token_rows));
    // Without the model's hidden state at the last row, no draft: the placeholders stay
    // (and are verified as any draft is).
    if (job.wanted > 0 && !(h.hidden_from < token_rows && h.hidden_end(hidden_size_) >= token_rows)) job.wanted = 0;
    return;
  }
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
  jobs.reserve(step.entries.size());
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const StepEntry& e = step.entries[i];
    const bool drafts = e.num_draft_tokens > 0 && e.logits_row >= 0;
    // An MTP head also catches up on the hidden states of sequences not drafting now.
    if (!drafts && !(mtp_ && !assistant_ && held_.contains(e.seq->seq_id))) continue;
    Job& j = jobs.emplace_back();
    j.seq = e.seq;
    j.entry = i;
    j.wanted = drafts ? e.num_draft_tokens : 0;
    resume(j);
    if (j.wanted == 0 && (assistant_ || j.computed >= j.row_end(hidden_size_))) {
      jobs.pop_back();
      continue;
    }
    const SamplingParams& p = *j.params;
    if (p.repetition_penalty != 1.0 || p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 || p.min_tokens > 0)
      j.context = e.seq->token_ids;
  }
  max_catch_up_ = 0;
  for (const Job& j : jobs)
    max_catch_up_ = std::max(max_catch_up_, j.seq->num_tokens() - (mtp_ ? 1 : 0) - j.computed);
  std::vector<Job*> pending;
  for (Job& j : jobs) pending.push_back(&j);
  while (!pending.empty()) {
    forward(pending);
    std::erase_if(pending, [this](const Job* j) {
      return int64_t(j->drafts.size()) == j->wanted && (j->wanted > 0 || j->computed >= j->row_end(hidden_size_));
    });
  }
  for (Job& j : jobs) {
    Sequence& seq = *step.entries[j.entry].seq;
    Held& h = *j.held;
    if (j.wanted > 0) {
      seq.draft_tokens = j.drafts;
      // The entry's last rows are its last token, then the drafts.
      const int32_t end = step.batch.query_start[j.entry + 1];
      std::copy(seq.draft_tokens.begin(), seq.draft_tokens.end(),
                step.batch.token_ids.begin() + std::ptrdiff_t(end - j.wanted));
    }
    h.blocks = seq.block_table;
    h.preemptions = seq.num_preemptions;
    if (!mtp_) {  // every draft but the last has its K and V in the draft's cache
      h.tokens = seq.num_tokens();
      h.drafts.assign(j.drafts.begin(), j.drafts.end() - 1);
      continue;
    }
    // An MTP head keeps the rows it ran on the model's hidden states, and of those only
    // the last row's hidden state (run again for the next first draft).
    h.tokens = std::min(j.computed, seq.num_tokens() - 1);
    const int64_t keep_from = std::clamp(h.tokens - 1, h.hidden_from, h.hidden_end(hidden_size_));
    h.hidden.erase(h.hidden.begin(), h.hidden.begin() + std::ptrdiff_t((keep_from - h.hidden_from) * hidden_size_));
    h.hidden_from = keep_from;
  }
}

void DraftModel::observe(const ScheduledStep& step, const std::vector<float>& hidden) {
  if (!mtp_) return;
  const auto H = size_t(hidden_size_);
  for (size_t i = 0; i < step.entries.size(); ++i) {
    const StepEntry& e = step.entries[i];
    const Sequence& seq = *e.seq;
    if (e.draft_hidden_row < 0) {
      if (seq.no_more_drafts) retire(seq.seq_id);
      continue;
    }
    // The hidden state at position p stands when every token up to p does: p is at most
    // the sequence's second-to-last position once the accepted tokens are appended.
    const int64_t end = step.batch.context_lens[i], start = end - e.num_new_tokens;
    const int64_t valid_end = std::min(end, seq.num_tokens() - 1);
    if (valid_end <= start) continue;
    SPARK_CHECK(hidden.size() >= (size_t(e.draft_hidden_row) + size_t(valid_end - start)) * H,
                "the step returned fewer hidden rows than it planned");
    Held& h = held_of(seq);
    if (start != h.hidden_end(hidden_size_)) {  // not where the last ones ended: a preempted sequence's recompute
      h.hidden.clear();
      h.hidden_from = start;
    }
    const auto first = hidden.begin() + std::ptrdiff_t(size_t(e.draft_hidden_row) * H);
    h.hidden.insert(h.hidden.end(), first, first + std::ptrdiff_t(size_t(valid_end - start) * H));
    if (assistant_ && h.hidden_end(hidden_size_) - h.hidden_from > 1) {  // it reads the last one only
      h.hidden.erase(h.hidden.begin(), h.hidden.end() - std::ptrdiff_t(H));
      h.hidden_from = valid_end - 1;
    }
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
  const auto H = size_t(hidden_size_);
  hidden_in_.clear();
  int64_t budget = max_step_tokens_;
  for (Job* j : jobs) {
    if (budget == 0) break;
    const Sequence& seq = *j->seq;
    const int64_t end = std::min(j->row_end(hidden_size_), j->computed + budget);
    if (j->slot >= 0) {
      b.state_slots.push_back(j->slot);
      const auto snapshot = static_cast<int32_t>(j->slot + max_running_);
      if (j->restore) b.state_copies.insert(b.state_copies.end(), {snapshot, j->slot});
      // The state holds exactly the sequence's tokens before its first draft row.
      if (j->computed == j->seq->num_tokens()) b.state_copies.insert(b.state_copies.end(), {j->slot, snapshot});
      j->restore = false;
    }
    // An assistant's one row is at the sequence's last position and reads the model's K and
    // V before it; it writes none, so its slot is that position's, which the step holds.
    const int64_t last = seq.num_tokens() - 1;
    for (int64_t pos = j->computed; pos < end; ++pos) {
      const int64_t at = assistant_ ? last : pos;
      b.token_ids.push_back(j->row_token(pos));
      b.positions.push_back(static_cast<int32_t>(at));
      if (mtp_) {
        const float* h = row_hidden(*j, pos);
        hidden_in_.insert(hidden_in_.end(), h, h + H);
      }
      b.slot_mapping.push_back(static_cast<int32_t>(seq.block_table[size_t(at / block_size_)] * block_size_ + at % block_size_));
    }
    budget -= end - j->computed;
    j->computed = end;
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(static_cast<int32_t>(assistant_ ? last : end));
    b.block_tables.insert(b.block_tables.end(), seq.block_table.begin(), seq.block_table.end());
    b.block_tables.resize(b.block_tables.size() + (max_blocks - seq.block_table.size()), 0);
    if (end == j->rows() && int64_t(j->drafts.size()) < j->wanted) {
      b.logits_rows.push_back(b.num_tokens() - 1);
      sampled.push_back(j);
    }
  }
  // An MTP head's next draft row reads its final hidden state at this one.
  if (mtp_) b.hidden_rows = b.logits_rows;
  const float* hidden_in = mtp_ ? hidden_in_.data() : nullptr;
  if (sampled.empty()) {  // a catch-up without drafts, or a long one that filled the whole step
    backend_->forward(b, hidden_in, result_);
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
  const std::vector<float>* head_hidden = &samples_.hidden;
  if (backend_->samples_on_device()) {
    backend_->forward_sample(b, hidden_in, rows, samples_);
    for (size_t r = 0; r < sampled.size(); ++r) tokens[r] = samples_.samples[r].token;
  } else {
    backend_->forward(b, hidden_in, result_);
    head_hidden = &result_.final_hidden;
    const auto vocab = static_cast<size_t>(vocab_size_);
    SPARK_CHECK(result_.logits.size() == sampled.size() * vocab, "the draft model returned the wrong number of logits");
    for (size_t r = 0; r < sampled.size(); ++r) {
      const SampleRow& q = rows[r];
      tokens[r] = sampler_->sample(result_.logits.data() + r * vocab, *q.params, q.context, q.num_prompt_tokens, q.seed,
                                   q.counter).token;
    }
  }
  ++forwards_;
  if (mtp_)
    SPARK_CHECK(head_hidden->size() == sampled.size() * H, "the MTP head returned the wrong number of hidden states");
  for (size_t r = 0; r < sampled.size(); ++r) {
    Job& j = *sampled[r];
    j.drafts.push_back(tokens[r]);
    if (!j.context.empty()) j.context.push_back(tokens[r]);
    if (mtp_) j.head_hidden.assign(head_hidden->begin() + std::ptrdiff_t(r * H), head_hidden->begin() + std::ptrdiff_t((r + 1) * H));
  }
}

}  // namespace spark
