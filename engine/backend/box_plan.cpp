// box_plan.cpp — planning several models against one budget (see box_plan.h).
#include "engine/backend/box_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "engine/util/check.h"

namespace spark {

std::vector<ModelPlan> plan_box(const Config& config) {
  std::vector<ModelPlan> plans;
  const size_t count = std::max<size_t>(config.models.size(), 1);
  for (size_t i = 0; i < count; ++i) {
    ModelPlan p;
    p.config = model_run_config(config, i);
    p.name = served_model_name(p.config.model);
    p.memory_share = memory_share_of(config, i);
    try {
      p.stage = plan_stage(p.config);
    } catch (const InputError& e) {
      if (count == 1) throw;  // one model: its messages stay as they always were
      throw InputError("model '" + p.name + "': " + e.what());
    }
    plans.push_back(std::move(p));
  }
  return plans;
}

int64_t kv_blocks_to_allocate(const Config& config, const MemoryPlan& plan) {
  const int64_t useful =
      std::max<int64_t>(config.engine.max_num_seqs * plan.blocks_per_sequence, plan.blocks_per_sequence);
  return std::min(plan.kv_blocks, useful);
}

uint64_t planned_bytes(const Config& config, const MemoryPlan& plan) {
  return plan.weight_bytes + plan.draft_weight_bytes + plan.workspace_bytes + plan.draft_workspace_bytes +
         plan.reserve_bytes + plan.state_bytes_per_sequence * uint64_t(plan.state_slots) +
         kv_cache_bytes(plan, kv_blocks_to_allocate(config, plan));
}

std::string describe_box_plan(const Config& config, const std::vector<ModelPlan>& plans) {
  std::ostringstream o;
  uint64_t total = 0;
  for (const ModelPlan& p : plans) {
    char share_text[32];
    std::snprintf(share_text, sizeof share_text, "%.3g", p.memory_share);
    o << "model '" << p.name << "' (role " << p.config.model.role << ", memory_share " << share_text << ")\n"
      << describe_plan(p.stage.memory);
    if (p.stage.memory.fits) total += planned_bytes(p.config, p.stage.memory);
  }
  if (!plans.empty()) {
    const MemoryPlan& first = plans.front().stage.memory;
    const auto budget = static_cast<uint64_t>(double(first.available_bytes) * config.engine.memory_fraction);
    const bool all_fit =
        std::all_of(plans.begin(), plans.end(), [](const ModelPlan& p) { return p.stage.memory.fits; });
    o << "box\n  models           " << plans.size() << "\n  planned          " << format_bytes(total)
      << (all_fit ? "" : " (of the models that fit)") << " (weights, workspace, reserve, state, kv blocks used)\n"
      << "  budget           " << format_bytes(budget) << " = " << format_bytes(first.available_bytes) << " "
      << first.budget_source << " x memory_fraction " << config.engine.memory_fraction << "\n";
  }
  return o.str();
}

void require_box_fits(const std::vector<ModelPlan>& plans) {
  for (const ModelPlan& p : plans) {
    if (p.stage.memory.fits) continue;
    if (plans.size() == 1) require_fits(p.stage.memory);
    // Its plan's memory_fraction is already scaled by the share: say so, or the numbers
    // in the problem would not match the config.
    char share_text[32];
    std::snprintf(share_text, sizeof share_text, "%.3g", p.memory_share);
    throw InputError("model '" + p.name + "' does not fit in its memory_share " + share_text +
                     " (memory_fraction below is the box's times the share): " + p.stage.memory.problem);
  }
}

}  // namespace spark
