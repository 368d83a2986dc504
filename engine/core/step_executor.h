// step_executor.h — what runs the steps the engine plans: the local backend on one box
// (local_executor.h), or the two-stage pipeline over the peer link
// (engine/peer/pipeline_executor.h). The engine plans, emits and retires; the executor
// computes, and may keep several steps in flight (one per micro-batch slot).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/metrics.h"
#include "engine/core/scheduler.h"
#include "engine/step/step.h"

namespace spark {

class StepExecutor {
 public:
  virtual ~StepExecutor() = default;

  // Micro-batch slots: how many steps may be in flight at once, each from a scheduler of
  // its own (1 on one box; 2 in a pipeline, so both boxes compute at once).
  virtual size_t num_slots() const = 0;
  // Sizes the KV cache (sliding-window layers hold the first num_window_blocks blocks
  // only, Backend::init_windowed_kv_cache) and the recurrent layers' state slots, and
  // fixes the EOS ids that min_tokens masks; once, before any step.
  virtual void prepare(int64_t num_kv_blocks, int64_t num_window_blocks, int64_t block_size,
                       const std::vector<int32_t>& eos_token_ids, int64_t num_state_slots) = 0;

  // Asked at the start of each engine turn.
  struct Readiness {
    bool ready = true;        // steps can be launched now
    bool state_lost = false;  // KV written by earlier steps is gone: cached prefixes are stale
    std::string lost_why;     // non-empty: the live requests can no longer finish (fail them)
  };
  virtual Readiness readiness() { return {}; }
  // "" while new requests can be served, else why not (submit refuses with it).
  virtual std::string problem() const { return {}; }

  // Rows a step can hold at about the cost of one (the backend's cost model: below it a
  // step's time is its weight reads). Speculative drafts fill steps up to it, no further.
  virtual int64_t rows_at_decode_cost() const { return 1; }

  // Starts `step` (the engine keeps it alive until finish_oldest returns its output).
  // Throws PeerLost when the remote part of the pipeline is gone.
  virtual void launch(const ScheduledStep& step) = 0;
  // Waits for the oldest launched step: one sample per logits row and one final hidden
  // state per hidden row, in row order.
  virtual StepOutput finish_oldest() = 0;

  // A sequence ended (finished, aborted or failed); state kept for it may go.
  virtual void retire(int64_t seq_id) {}
  // Every live request failed (the pipeline was lost): forget all per-sequence state.
  virtual void forget_all() {}

  // Where the executor records what only it measures (constraint masks); set by the
  // engine before any step, valid while steps run.
  void set_metrics(Metrics* metrics) { metrics_ = metrics; }

 protected:
  // Hands a step's constraint-mask times to the metrics in one call, and clears them.
  void report_mask_times(std::vector<double>& seconds) {
    if (metrics_) metrics_->observe_mask_times(seconds);
    seconds.clear();
  }

 private:
  Metrics* metrics_ = nullptr;
};

}  // namespace spark
