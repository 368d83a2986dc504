// backend.h — the one interface every compute backend (CPU, CUDA) implements.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/weights.h"
#include "engine/step/step.h"
#include "engine/util/check.h"

namespace spark {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string describe() const = 0;  // "cpu (8 threads)", "cuda (NVIDIA H100)"
  virtual LayerRange layers() const = 0;
  // Bytes one KV block of block_size tokens takes across the layers this backend holds.
  virtual size_t kv_block_bytes(int64_t block_size) const = 0;
  // Allocates the paged KV cache before the first forward. A later call replaces it, its
  // contents gone (a pipeline worker's next session may size it otherwise).
  virtual void init_kv_cache(int64_t num_blocks, int64_t block_size) = 0;
  // The same with storage in sliding-window layers for blocks [0, num_window_blocks)
  // only (engine/core/block_manager.h); such a backend runs Batch::block_copies in its
  // full-attention layers. One that cannot takes num_window_blocks == num_blocks only
  // (the memory plan asks it for no less: StageFootprint::sliding_kv_window_only).
  virtual void init_windowed_kv_cache(int64_t num_blocks, int64_t num_window_blocks, int64_t block_size) {
    SPARK_CHECK(num_window_blocks == num_blocks, "this backend keeps every layer's K and V for every block");
    init_kv_cache(num_blocks, block_size);
  }
  // Gemma 4's assistant (ModelSpec::assistant_of_hidden) reads the model it drafts for: its
  // embedding, and the K and V of its last layer of each type. Its backend is given the
  // model's (of the same kind, holding every layer) once both exist, before the first
  // forward; InputError when the two do not fit, or this backend cannot.
  virtual void attach_model(const Backend& model) {
    throw InputError(describe() + " does not run Gemma 4's assistant drafter");
  }
  // Recurrent layers (the hybrids' Gated DeltaNet): the states of `num_slots` sequences,
  // Batch::state_slots naming each sequence's. A later call replaces them. A backend whose
  // layers hold no state needs none.
  virtual void init_state_slots(int64_t num_slots) {}
  // After the cache and the state slots, before the first request: what a first step of
  // each size would otherwise pay for (the CUDA backend captures its decode graphs here,
  // so no live step waits on a capture). A later init_* call may undo it; call it again.
  virtual void warm_up() {}
  // Runs the held layers. hidden_in is [num_tokens x hidden_size] from the previous stage,
  // or nullptr when this backend holds the embedding and starts from token ids.
  virtual void forward(const Batch& batch, const float* hidden_in, ForwardResult& out) = 0;

  // The cost model speculative decoding asks: how many rows one step can hold before its
  // time grows with the rows rather than with the weight bytes it reads (the roofline's
  // knee for this device and model). Drafts beyond it would slow the step.
  virtual int64_t rows_at_decode_cost() const { return 1; }

  // A backend that holds the LM head may also sample on its device, so that only token
  // ids and requested logprobs come back to the host (the CPU backend returns logits and
  // the engine's Sampler draws). rows[r] belongs to batch.logits_rows[r]; same semantics
  // as Sampler. hidden_in as for forward (a pipeline's last stage gets the previous
  // stage's hidden states). out.hidden holds the batch's hidden rows, as
  // ForwardResult::final_hidden.
  virtual bool samples_on_device() const { return false; }
  virtual void forward_sample(const Batch& batch, const float* hidden_in, const std::vector<SampleRow>& rows,
                              StepOutput& out) {
    SPARK_CHECK(false, "forward_sample on a backend that does not sample on its device");
  }

  // The stage boundary on the device, for links that move device memory (NCCL): no host
  // copy, and 16-bit values (half the bytes of f32). A backend that can:
  virtual bool boundary_on_device() const { return false; }
  // First stages: runs the held layers and leaves the hidden states on the device, valid
  // until the next call on this backend.
  virtual DeviceHidden forward_to_boundary(const Batch& batch) {
    SPARK_CHECK(false, "forward_to_boundary on a backend without a device boundary");
    return {};
  }
  // Later stages: the device buffer `tokens` rows of hidden states are received into; the
  // next forward or forward_sample given hidden_in = nullptr reads them there, in place.
  virtual DeviceHidden boundary_input(size_t tokens) {
    SPARK_CHECK(false, "boundary_input on a backend without a device boundary");
    return {};
  }
};

}  // namespace spark
