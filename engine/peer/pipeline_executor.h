// pipeline_executor.h — the head's steps in peer mode: each micro-batch runs this box's
// layers here and goes to the RemoteStage, which runs the rest, samples and answers.
// Two micro-batch slots, so that while the worker computes one, this box computes the
// other. A lost peer fails the live requests, not the engine.
//
// Structured outputs: the worker samples, but the grammar's state (each sequence's
// matcher) lives here, beside the tokenizer. Each constrained row's token mask goes with
// the plan, computed from the matcher as it stands (a sequence is in one micro-batch at a
// time, so it has every earlier token); the worker masks the row with it before drawing,
// and the matcher steps by the sample when it comes back.
#pragma once
#include <deque>
#include <memory>
#include <unordered_set>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/step_executor.h"
#include "engine/peer/stage.h"

namespace spark {

class PipelineExecutor : public StepExecutor {
 public:
  // `backend` holds the first layers; `remote` (which must outlive this) the rest.
  PipelineExecutor(std::unique_ptr<Backend> backend, RemoteStage& remote, int64_t hidden_size, int64_t vocab_size);

  // Two micro-batches in flight, one on each box.
  static constexpr size_t kMicroBatches = 2;
  size_t num_slots() const override { return kMicroBatches; }
  void prepare(int64_t num_kv_blocks, int64_t num_window_blocks, int64_t block_size,
               const std::vector<int32_t>& eos_token_ids, int64_t num_state_slots) override;
  Readiness readiness() override;
  std::string problem() const override { return remote_.problem(); }
  int64_t rows_at_decode_cost() const override { return backend_->rows_at_decode_cost(); }
  void launch(const ScheduledStep& step) override;
  StepOutput finish_oldest() override;
  void retire(int64_t seq_id) override;
  void forget_all() override;

 private:
  std::unique_ptr<Backend> backend_;
  RemoteStage& remote_;
  int64_t hidden_size_;
  int64_t vocab_size_;
  std::vector<int32_t> eos_ids_;
  uint64_t session_ = 0;  // the pairing the open sequences live in
  uint64_t next_plan_id_ = 1;
  std::unordered_set<int64_t> opened_;  // sequences the remote stage knows
  std::vector<int64_t> pending_closes_;  // retired sequences the remote still holds
  // A constrained sequence's rows in a plan sent: its matcher steps by their samples.
  struct ConstrainedRows {
    std::shared_ptr<constrain::Matcher> matcher;
    SamplingParams params;
    size_t first_row = 0;
    std::vector<int32_t> drafts;
  };
  struct Sent {
    uint64_t id = 0;
    size_t rows = 0;
    size_t hidden_values = 0;
    std::vector<ConstrainedRows> constrained;
  };
  void add_masks(const Sequence& seq, size_t first_row, int64_t num_drafts, MicroBatchPlan& mb, Sent& sent);
  std::vector<double> mask_seconds_;  // this step's mask times, for the metrics
  std::deque<Sent> in_flight_;  // oldest first
  ForwardResult result_;
};

}  // namespace spark
