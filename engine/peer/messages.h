// messages.h — the peer protocol's payloads and their codecs. Every decoder checks
// every count, range and cross-field relation before anything acts on the data: a
// frame from the peer is outside input (InputError on any violation).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/step/step.h"

namespace spark {

// What each box says about itself at the handshake; the pair serves only when these agree.
struct PeerIdentity {
  std::string sparkd_version;
  uint64_t model_fingerprint = 0;
  std::string model_label;  // file or folder name and size, for messages
  int64_t num_layers = 0;
  int64_t layer_split = 0;  // first layer of the worker
  int64_t block_size = 0;
  std::string kv_dtype;
  std::string transport;
  // Head: KV blocks its block tables address. Worker: KV blocks it can hold.
  int64_t kv_blocks = 0;
};
std::vector<uint8_t> encode_identity(const PeerIdentity& id);
PeerIdentity decode_identity(const std::vector<uint8_t>& payload);
// Every disagreement between the head's and the worker's identity, each naming both
// values ("layer split: head 15, worker 12"); empty when they can pair.
std::vector<std::string> identity_mismatches(const PeerIdentity& head, const PeerIdentity& worker);

// The head's answer to an acceptable HELLO: the session's limits, which bound every
// later frame.
struct Welcome {
  uint64_t session = 0;
  int64_t kv_blocks = 0;
  // Blocks [0, window_blocks) hold every layer's K and V, the others the full-attention
  // layers' only (Backend::init_windowed_kv_cache); kv_blocks for a model without sliding
  // layers. A plan's block copies move a block from the first kind to the second.
  int64_t window_blocks = 0;
  // Recurrent state slots (state_slots_for): each box keeps its own layers' states in its
  // slots, and a plan names each sequence's slot (Batch::state_slots). 0: no recurrent layers.
  int64_t state_slots = 0;
  int64_t block_size = 0;
  int64_t max_step_tokens = 0;  // engine.max_num_batched_tokens
  int64_t max_step_seqs = 0;    // engine.max_num_seqs
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  std::vector<int32_t> eos_token_ids;  // the head's (model + tokenizer), for min_tokens
  double heartbeat_s = 1;
  double timeout_s = 10;
  std::vector<uint8_t> nccl_unique_id;  // empty for the TCP data path
};
std::vector<uint8_t> encode_welcome(const Welcome& w);
Welcome decode_welcome(const std::vector<uint8_t>& payload);

// A sequence the worker has not sampled for yet: what its sampler needs.
struct SeqOpen {
  int64_t seq_id = 0;
  int64_t num_prompt_tokens = 0;
  uint64_t seed = 0;
  SamplingParams params;        // only the fields the sampler reads travel
  std::vector<int32_t> tokens;  // prompt and output so far
};

// One micro-batch: sequences to forget and to learn, the batch, and for each logits row
// the sequence to sample for. Its activations follow on the data path.
struct MicroBatchPlan {
  uint64_t id = 0;
  std::vector<int64_t> closes;
  std::vector<SeqOpen> opens;
  Batch batch;
  std::vector<int64_t> sample_seq_ids;  // [batch.logits_rows.size()]
  // [batch.logits_rows.size()]: a structured-output row's token mask (one bit per id,
  // computed by the head, which holds the grammar's state); empty for a free row.
  std::vector<std::vector<uint64_t>> row_masks;
};
// Words of a row mask over a vocabulary of `vocab` ids.
inline int64_t mask_words(int64_t vocab) { return (vocab + 63) / 64; }
std::vector<uint8_t> encode_plan(const MicroBatchPlan& p);
// Decodes and validates against the session's limits (block ids, slots, positions,
// row boundaries): a plan that passes can be run without any further check.
MicroBatchPlan decode_plan(const std::vector<uint8_t>& payload, const Welcome& session);
// The structural checks alone (also used by tests): throws InputError naming the field.
void check_batch(const Batch& b, const Welcome& session);

struct StepResult {
  uint64_t id = 0;
  int64_t worker_start_us = 0, worker_end_us = 0;  // wall clock, for the pipeline timeline
  StepOutput output;  // a sample per logits row, a final hidden state per hidden row
};
std::vector<uint8_t> encode_result(const StepResult& r);
// What a plan's result must hold: its logits rows, and hidden rows x hidden_size values.
struct ResultShape {
  size_t rows = 0;
  size_t hidden_values = 0;
  int64_t vocab_size = 0;  // sampled tokens are checked against it
  // The largest frame such a result can take.
  size_t max_payload() const;
};
StepResult decode_result(const std::vector<uint8_t>& payload, const ResultShape& shape);

// REFUSE and PROBE_REPLY carry one string.
std::vector<uint8_t> encode_text(const std::string& s);
std::string decode_text(const std::vector<uint8_t>& payload);

}  // namespace spark
