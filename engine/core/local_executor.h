// local_executor.h — the steps of one box: the backend's forward over every layer, then
// sampling, on the device when the backend can or with the engine's Sampler.
#pragma once
#include <deque>
#include <memory>
#include <optional>

#include "engine/backend/backend.h"
#include "engine/core/sampler.h"
#include "engine/core/step_executor.h"

namespace spark {

class LocalExecutor : public StepExecutor {
 public:
  LocalExecutor(std::unique_ptr<Backend> backend, int64_t vocab_size);

  size_t num_slots() const override { return 1; }
  void prepare(int64_t num_kv_blocks, int64_t num_window_blocks, int64_t block_size,
               const std::vector<int32_t>& eos_token_ids, int64_t num_state_slots) override;
  int64_t rows_at_decode_cost() const override { return backend_->rows_at_decode_cost(); }
  // Runs the step to the end: its output waits for finish_oldest.
  void launch(const ScheduledStep& step) override;
  StepOutput finish_oldest() override;

 private:
  std::unique_ptr<Backend> backend_;
  int64_t vocab_size_;
  std::optional<Sampler> sampler_;
  ForwardResult result_;
  std::vector<std::vector<int32_t>> contexts_;  // per step entry: its tokens and drafts
  std::deque<StepOutput> done_;
};

}  // namespace spark
