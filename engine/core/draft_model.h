// draft_model.h — speculative decoding with a separate, smaller model of the same
// tokenizer ([engine] speculative = "draft", speculative_model): it proposes each
// sequence's drafts one token after the other, before the target verifies them in its
// step. Each draft is sampled with the request's own parameters and the very draw the
// model's sample at that position uses (uniform01(seed, output index), engine/core/
// sampler.h): the draft is a point mass (engine/core/speculator.h), so the outputs,
// seeded ones included, are exactly those without drafts, and a draft holds whenever the
// two models' inverse-CDF draws agree: always for greedy requests whose top tokens agree,
// and at temperature about as often as their distributions overlap.
//
// The draft's KV cache has as many blocks as the target's and a sequence's draft K and V
// live in the blocks of its own block table: the scheduler allocates the drafts'
// positions for the target's verification rows anyway, so the draft needs no block
// manager of its own and the memory plan counts its KV per block beside the target's.
// The draft runs a sequence's tokens lazily: at each step, what its KV does not hold yet
// (the whole prompt at the first, then the accepted drafts and the token after them),
// then one row per further draft. It remembers which tokens its KV holds in which blocks,
// so rejected drafts are run again and a preempted sequence starts over.
//
// A draft with recurrent layers (a small hybrid for a large one) keeps two state slots per
// sequence: its state, and a snapshot taken before its first draft row, when the state
// holds exactly the sequence's tokens. Drafts the model rejected are undone by copying
// the snapshot back (Batch::state_copies), then the accepted ones are run again.
//
// The model's own MTP head ([engine] speculative = "mtp", ModelSpec::mtp_head) is run the
// same way, with one difference: its row at position p reads the token at p + 1 and the
// model's final hidden state at p, and predicts the token at p + 2. So it runs one row
// fewer than the sequence has tokens, and each row needs the model's hidden state there:
// the scheduler makes every row of a sequence that may draft a hidden row
// (SchedulerConfig::hidden_for_drafts), observe() keeps those the step's accepted tokens
// leave valid, and the next draft() feeds them to the head, eagerly, whether or not the
// sequence drafts in that step (so a long prompt's rows are not held for long). Draft
// rows read the head's own hidden state from the row before, as the head was trained;
// they are never kept, since the model's hidden state replaces the head's once the
// drafts are verified. Rows in prefix-cached blocks keep the head's K and V written by
// the sequence that filled them (the model computes no hidden state there).
//
// Gemma 4's assistant ([engine] speculative = "draft" with an assistant's checkpoint,
// ModelSpec::assistant_of_hidden) is run as an MTP head without K and V of its own: its
// layers read the model's, those of the tokens before the sequence's last (the model's K and
// V of the accepted tokens, in the sequence's blocks). So it runs no catch-up rows: only
// the draft rows, each at the position of the sequence's last token (as transformers'
// drafting loop does), the first reading the model's hidden state before it, each later
// one the assistant's own output hidden state. It keeps only the last of the model's hidden
// states of a sequence.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/sampler.h"
#include "engine/core/scheduler.h"
#include "engine/model/model_spec.h"
#include "engine/tokenizer/tokenizer.h"

namespace spark {

// InputError unless every token id of the draft's tokenizer is the model's, as the same
// text: drafts are token ids, so both must read them alike.
void require_same_vocabulary(const Tokenizer& model, const Tokenizer& draft);

class DraftModel {
 public:
  // `backend` holds all of the draft's layers (`spec`); each of its forwards has at most
  // max_step_tokens rows (the target's step budget, which sized both backends).
  DraftModel(std::unique_ptr<Backend> backend, const ModelSpec& spec, int64_t max_step_tokens);

  // Sizes the draft's KV cache like the target's, and with recurrent layers the states of
  // max_running sequences; the EOS ids min_tokens masks. Once, before any draft.
  void prepare(int64_t num_kv_blocks, int64_t block_size, int64_t max_running, const std::vector<int32_t>& eos_token_ids);

  // Replaces the placeholder drafts of every entry of `step` that verifies some (planned
  // by the Speculator for a draft model) by the draft model's samples, in
  // seq->draft_tokens and in the step's rows.
  void draft(ScheduledStep& step);

  // An MTP head: the step ran, the engine appended the accepted tokens, and `hidden` holds
  // the step's hidden rows (StepEntry::draft_hidden_row); those of positions whose tokens
  // all stand are kept for the next draft().
  bool reads_model_hidden() const { return mtp_; }
  void observe(const ScheduledStep& step, const std::vector<float>& hidden);

  void retire(int64_t seq_id);
  void forget_all();

  int64_t forwards() const { return forwards_; }  // draft forwards run so far
  // The most tokens the last draft() ran for a sequence before its first draft: 1 or 2
  // in the steady state, a whole prompt for a sequence's first drafts.
  int64_t max_catch_up() const { return max_catch_up_; }

 private:
  // What the draft's KV holds for one sequence: K and V of its first `tokens` rows
  // (which never change) and then of `drafts`, in the blocks `blocks` named when they
  // were written. A draft model's row p is token p; an MTP head's, token p + 1.
  struct Held {
    int64_t tokens = 0;
    std::vector<int32_t> drafts;
    std::vector<int32_t> blocks;
    int64_t preemptions = 0;
    int32_t slot = -1;  // recurrent layers: its state slot; the snapshot is max_running_ above
    // What the draft samples with, made once per sequence: the request's parameters
    // without logprobs and without ids the draft lacks.
    std::optional<SamplingParams> params;
    // An MTP head: the model's final hidden states of positions [hidden_from, +rows) not
    // yet run, [rows x hidden_size].
    int64_t hidden_from = 0;
    std::vector<float> hidden;
    int64_t hidden_end(int64_t H) const { return hidden_from + int64_t(hidden.size()) / H; }
  };
  // One sequence being drafted for: its known tokens are its context, then the drafts so
  // far; the draft's KV holds the first `computed` of them.
  struct Job {
    const Sequence* seq = nullptr;
    size_t entry = 0;
    int64_t wanted = 0;  // drafts to make; 0: an MTP head catching up on hidden states
    std::vector<int32_t> drafts;
    int64_t computed = 0;  // rows
    bool mtp = false;
    Held* held = nullptr;
    std::vector<float> head_hidden;  // an MTP head: its own final hidden state at its last row
    int32_t slot = -1;
    bool restore = false;  // the state goes back to the snapshot before its first row
    const SamplingParams* params = nullptr;  // Held::params
    std::vector<int32_t> context;  // its context and drafts, when penalties or min_tokens read them

    int64_t known() const { return seq->num_tokens() + int64_t(drafts.size()); }
    int32_t token_at(int64_t pos) const {
      return pos < seq->num_tokens() ? seq->token_ids[size_t(pos)] : drafts[size_t(pos - seq->num_tokens())];
    }
    // Rows its tokens (and drafts) allow, and the token row `row` reads.
    int64_t rows() const { return known() - (mtp ? 1 : 0); }
    int32_t row_token(int64_t row) const { return token_at(mtp ? row + 1 : row); }
    // The last row it may run now: an MTP head's rows before its drafts need the model's
    // hidden states, which may not have come yet (a prompt's later chunks).
    int64_t row_end(int64_t H) const;
  };
  // Where the draft's cache and state let `job` start, whether from the snapshot, and
  // what it samples with.
  void resume(Job& job);
  // One forward over the next rows of `jobs` (as many as the step budget takes); the jobs
  // whose rows reached their last known token get the draft's sample appended.
  void forward(std::vector<Job*>& jobs);

  // What the draft holds for `seq` (an MTP head's: nothing once the sequence was preempted).
  Held& held_of(const Sequence& seq);
  // The hidden state MTP row `row` of `job` reads.
  const float* row_hidden(const Job& job, int64_t row) const;

  std::unique_ptr<Backend> backend_;
  int64_t vocab_size_;
  int64_t hidden_size_;
  bool recurrent_;
  bool mtp_;        // reads the model's hidden states: an MTP head or an assistant
  bool assistant_;  // Gemma 4's assistant
  int64_t max_running_ = 0;
  std::vector<int32_t> free_slots_;
  int64_t max_step_tokens_;
  int64_t block_size_ = 0;
  std::optional<Sampler> sampler_;  // a backend that returns logits
  std::unordered_map<int64_t, Held> held_;
  Batch batch_;
  std::vector<float> hidden_in_;  // an MTP head's: [rows x hidden_size] for batch_
  ForwardResult result_;
  StepOutput samples_;
  int64_t forwards_ = 0;
  int64_t max_catch_up_ = 0;
};

}  // namespace spark
