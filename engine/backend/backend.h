// backend.h — the one interface every compute backend (CPU, CUDA) implements.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/core/sampler.h"
#include "engine/model/weights.h"
#include "engine/util/check.h"

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

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return query_start.empty() ? 0 : static_cast<int32_t>(query_start.size()) - 1; }
};

// What sampling one logits row needs, for a backend that samples on its device: the
// request's parameters and its context (penalties), and its draw (uniform01(seed, counter)).
struct SampleRow {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> context;  // prompt tokens, then the output tokens so far
  int64_t num_prompt_tokens = 0;
  uint64_t seed = 0;
  uint64_t counter = 0;  // index of the output token being drawn
};

struct ForwardResult {
  // When the backend holds the LM head: [logits_rows.size() x vocab_size], f32.
  std::vector<float> logits;
  // When it does not (a pipeline stage before the last): [num_tokens x hidden_size], f32.
  std::vector<float> hidden;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;  // "cpu (8 threads)", "cuda (NVIDIA H100)"
  virtual LayerRange layers() const = 0;
  // Bytes one KV block of block_size tokens takes across the layers this backend holds.
  virtual size_t kv_block_bytes(int64_t block_size) const = 0;
  // Allocates the paged KV cache once, before the first forward.
  virtual void init_kv_cache(int64_t num_blocks, int64_t block_size) = 0;
  // Runs the held layers. hidden_in is [num_tokens x hidden_size] from the previous stage,
  // or nullptr when this backend holds the embedding and starts from token ids.
  virtual void forward(const Batch& batch, const float* hidden_in, ForwardResult& out) = 0;

  // A backend that holds the LM head may also sample on its device, so that only token
  // ids and requested logprobs come back to the host (the CPU backend returns logits and
  // the engine's Sampler draws). rows[r] belongs to batch.logits_rows[r]; same semantics
  // as Sampler. hidden_in as for forward (a pipeline's last stage gets the previous
  // stage's hidden states).
  virtual bool samples_on_device() const { return false; }
  virtual void forward_sample(const Batch& batch, const float* hidden_in, const std::vector<SampleRow>& rows,
                              std::vector<SampleOutput>& out) {
    SPARK_CHECK(false, "forward_sample on a backend that does not sample on its device");
  }
};

}  // namespace spark
