// step.h — the vocabulary of one engine step, shared by the scheduler that plans it, the
// backends that run it and the peer link that carries it: the flattened batch, what
// sampling one row needs, and what comes back. Depends on nothing above it.
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/step/sampling_params.h"

namespace spark {

// One engine step, flattened. Rows are tokens; the rows of sequence s are
// [query_start[s], query_start[s+1]) and are the last (query_start[s+1] - query_start[s])
// tokens of its context. Prefill chunks and decode tokens mix freely. The layout is
// fixed-stride so a GPU backend can copy it into preallocated buffers and replay a graph.
struct Batch {
  std::vector<int32_t> token_ids;     // [T]
  std::vector<int32_t> positions;     // [T]
  std::vector<int32_t> slot_mapping;  // [T] KV slot written by each row: block * block_size + offset
  std::vector<int32_t> query_start;   // [S + 1]
  std::vector<int32_t> context_lens;  // [S] tokens in the cache once this step's rows are written
  std::vector<int32_t> block_tables;  // [S * max_blocks_per_seq], unused entries 0
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> logits_rows;  // rows whose logits are wanted, ascending
  // Rows whose final hidden state is wanted (after the final norm, where the LM head would
  // read it), ascending; a row may be in both lists. Embeddings pool these rows, draft
  // heads read them. Only the stage that holds the LM head returns them.
  std::vector<int32_t> hidden_rows;
  // [S] with recurrent layers (engine/model/layer_shape.h): the state slot each sequence
  // reads and updates (Backend::init_state_slots). A sequence whose rows start at
  // position 0 starts from a zero state. Empty for a model without recurrent layers.
  std::vector<int32_t> state_slots;
  // [2 * C] (source, destination) state slot pairs: before anything else, each recurrent
  // layer copies the source slot's state to the destination. A step that verifies drafts
  // keeps the state it started from in the sequence's snapshot slot; when drafts were
  // rejected, the next step restores it and recomputes the accepted tokens
  // (engine/core/scheduler.h).
  std::vector<int32_t> state_copies;
  // [2 * C] (source, destination) block pairs: before anything else, each full-attention
  // layer copies the source block's K and V to the destination block (a block that left
  // the sliding window moving to a full-only block, engine/core/block_manager.h).
  std::vector<int32_t> block_copies;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return query_start.empty() ? 0 : static_cast<int32_t>(query_start.size()) - 1; }
};

// What sampling one logits row needs: the request's parameters, its context (penalties),
// and its draw (uniform01(seed, counter), engine/core/sampler.h).
struct SampleRow {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> context;  // prompt tokens, then the output tokens so far
  int64_t num_prompt_tokens = 0;
  uint64_t seed = 0;
  uint64_t counter = 0;  // index of the output token being drawn
};

struct SampleOutput {
  int32_t token = -1;
  // Filled when params.logprobs: the chosen token's logprob and the top_logprobs most
  // likely (token, logprob) pairs, most likely first (ties: lower id first).
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top_logprobs;
};

// Hidden states at a pipeline stage boundary kept in device memory, for a link that moves
// device memory (NCCL): [count] 16-bit values, BF16 or FP16.
struct DeviceHidden {
  void* data = nullptr;
  size_t count = 0;
  bool bf16 = false;
  size_t bytes() const { return count * 2; }
};

struct ForwardResult {
  // When the backend holds the LM head: [logits_rows.size() x vocab_size], f32.
  std::vector<float> logits;
  // When it does not (a pipeline stage before the last): [num_tokens x hidden_size], f32.
  std::vector<float> hidden;
  // When it does: [hidden_rows.size() x hidden_size], f32, the final hidden state of each
  // hidden row.
  std::vector<float> final_hidden;
};

// What one step returns to the engine, row by row: a sample for each logits row and the
// final hidden state of each hidden row.
struct StepOutput {
  std::vector<SampleOutput> samples;  // [logits_rows.size()]
  std::vector<float> hidden;          // [hidden_rows.size() x hidden_size], f32
};

}  // namespace spark
