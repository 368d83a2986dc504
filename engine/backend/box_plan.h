// box_plan.h — one memory plan for every model a sparkd serves. Each model is planned with
// its memory_share of the budget before any of them reads a weight (so each sees the same
// MemAvailable), and a set that does not fit is refused up front, naming the model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/stage_loader.h"
#include "engine/config.h"

namespace spark {

struct ModelPlan {
  Config config;            // model_run_config: this model alone, its share in memory_fraction
  std::string name;         // the served name
  double memory_share = 1;  // memory_share_of: its fraction of the box's budget
  StagePlan stage;
};

// plan_stage for each model of `config`, in order; allocates nothing and does not require
// that the plans fit. With several models, a model's file errors are prefixed with its name.
std::vector<ModelPlan> plan_box(const Config& config);

// The KV blocks serve allocates from a plan: more than max_num_seqs full-length sequences
// can reference are never used (beyond prefix-cache retention).
int64_t kv_blocks_to_allocate(const Config& config, const MemoryPlan& plan);
// What a loaded model holds: weights, workspace, reserve, recurrent state, its KV blocks.
uint64_t planned_bytes(const Config& config, const MemoryPlan& plan);

// Each model's describe_plan under its name and role, then the box's total against its
// budget (MemAvailable x engine.memory_fraction of `config`).
std::string describe_box_plan(const Config& config, const std::vector<ModelPlan>& plans);
// Throws InputError for the first plan that does not fit; with several models the
// message starts with the model's name.
void require_box_fits(const std::vector<ModelPlan>& plans);

}  // namespace spark
