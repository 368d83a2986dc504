// attention.h — the paged f32 KV cache of one layer and causal attention over block tables.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/util/thread_pool.h"

namespace spark::cpu {

// Geometry shared by every layer's cache: slot s of a layer holds K (and V) of one token
// for all kv heads, at offset s * kv_heads * head_dim.
struct KvGeometry {
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t slots() const { return num_blocks * block_size; }
  int64_t slot_floats() const { return kv_heads * head_dim; }
};

// Zeroed floats from calloc: for a large cache the kernel hands out pages on first
// write, so a cache planned for the whole memory budget costs memory only as it fills.
class KvBuffer {
 public:
  void allocate(size_t floats);  // throws RuntimeError when the memory is not there
  float* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
};

struct LayerKv {
  KvBuffer k;  // [slots, kv_heads, head_dim]
  KvBuffer v;
};

// Copies block src's K and V to block dst for each (src, dst) pair of `pairs` (flattened).
void copy_blocks(const std::vector<int32_t>& pairs, const KvGeometry& g, LayerKv& cache);

// Stores the K and V rows of this step ([T, kv_heads * head_dim] each) at their slots.
void write_kv(const Batch& batch, const KvGeometry& g, const float* k, const float* v, LayerKv& cache);

// What a layer's attention adds to plain causal softmax attention (gpt-oss).
struct AttentionExtras {
  int64_t window = 0;             // > 0: each row sees only the last `window` tokens, itself included
  const float* sinks = nullptr;   // [heads]: a logit that joins each head's softmax and adds no value
  bool causal = true;             // false: every row sees its sequence's whole context (encoders)
  float scale = 0.0f;             // the logits' scale; 0: 1/sqrt(head_dim)
};

// For each row t of sequence s: attends over the first (context_lens[s] - rows_of_s + i + 1)
// tokens of s's context (i = t's index within s), read through s's block table (blocks
// wholly before a sliding window are never read: they may have no storage). q is
// [T, heads, head_dim]; out is the same shape. Heads share kv heads in groups (GQA).
void attention(ThreadPool& pool, const Batch& batch, const KvGeometry& g, int64_t heads, const float* q,
               const LayerKv& cache, float* out, const AttentionExtras& extras = {});

// Checks that the batch's sequence layout, slots and block tables fit the cache;
// aborts (SPARK_CHECK) on the first problem: batches come from the scheduler or a validated peer frame.
void validate_batch(const Batch& batch, const KvGeometry& g);
// Checks the batch's state slots and state copies against `num_slots` (engine/step/step.h):
// one slot a sequence, distinct, in range; copies in (source, destination) pairs of two
// slots in range. Throws InputError naming the first problem.
void validate_state_slots(const Batch& batch, int64_t num_slots);

}  // namespace spark::cpu
