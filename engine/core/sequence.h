// sequence.h — the state of one request as the scheduler and block manager see it.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/step/sampling_params.h"

namespace spark {

namespace constrain {
class Matcher;
class ToolCallWatch;
}

enum class SeqStatus : uint8_t { WAITING, RUNNING, PREEMPTED, FINISHED };

// Why a request ended; the strings are the OpenAI finish_reason values.
enum class FinishReason : uint8_t { STOP, LENGTH, ABORT, ERROR };
std::string_view finish_reason_name(FinishReason r);
std::string_view seq_status_name(SeqStatus s);

struct Sequence {
  Sequence(int64_t seq_id, std::vector<int32_t> prompt, SamplingParams params = {});

  int64_t seq_id;
  std::string request_id;
  std::vector<int32_t> token_ids;  // prompt followed by the output so far
  int64_t num_prompt_tokens;
  SamplingParams params;
  uint64_t seed = 0;  // the per-sequence sampling stream (params.seed or drawn at submit)
  int64_t max_tokens = 0;  // resolved limit on output tokens
  // This sequence's position in params.constraint's grammar (null when unconstrained);
  // the sampler masks with it and advances it by each token it draws.
  std::shared_ptr<constrain::Matcher> matcher;
  // Tool calls under tool_choice "auto": sets `matcher` while the model writes a call.
  std::shared_ptr<constrain::ToolCallWatch> tool_watch;

  SeqStatus status = SeqStatus::WAITING;
  std::optional<FinishReason> finish_reason;

  // Tokens whose KV is in the cache. Reset to 0 when the sequence is preempted: it is
  // recomputed from its blocks' worth of prompt and output when it resumes.
  int64_t num_computed_tokens = 0;
  // Tokens served from the prefix cache when the sequence was (last) admitted.
  int64_t num_cached_tokens = 0;
  int64_t num_preemptions = 0;

  // Drafts for the next step to verify (engine/core/speculator.h): planned as extra rows
  // after the last token. Set before each schedule; the step's outcome clears them.
  std::vector<int32_t> draft_tokens;
  // The speculator found that no drafts pay for this sequence: it drafts no more, and an
  // MTP head stops taking its hidden states.
  bool no_more_drafts = false;

  // Prompt only: the final hidden state of its last prompt token is its result, and it
  // samples nothing (Request::last_hidden_state).
  bool returns_hidden = false;

  // Its recurrent state's slot while it runs (a model with recurrent layers); -1 otherwise.
  int32_t state_slot = -1;
  // Drafts were rejected after the recurrent state took them in: the next step restores
  // the state from before them (its snapshot slot) and recomputes the accepted tokens.
  bool restore_state = false;
  // A prefill position where a state checkpoint is saved (engine/core/state_checkpoints.h):
  // the chunk that reaches it ends there. 0: none.
  int64_t checkpoint_at = 0;

  std::vector<int32_t> block_table;  // KV block ids, one per block_size tokens
  // Chained hashes of the first block_hashes.size() full blocks of token_ids. They depend
  // only on the tokens, so they survive preemption and are extended as tokens arrive.
  std::vector<uint64_t> block_hashes;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  bool is_finished() const { return status == SeqStatus::FINISHED; }
  // Tokens still to run through the model before the next token can be sampled.
  int64_t num_uncomputed_tokens() const { return num_tokens() - num_computed_tokens; }
  bool prefill_done() const { return num_computed_tokens >= num_prompt_tokens; }
  int32_t last_token() const { return token_ids.back(); }
  void append_token(int32_t id);  // an output token, as sampled
  std::vector<int32_t> prompt_ids() const;
  std::vector<int32_t> output_ids() const;
};

}  // namespace spark
