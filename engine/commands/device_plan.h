// device_plan.h — `sparkd check --device NAME`: the memory plan and projected batch-1
// decode rate of a model on a GPU that need not be present (gb10, h100, or
// "GiB,GB/s").
#pragma once
#include <string>

#include "engine/backend/stage_loader.h"
#include "engine/config.h"

namespace spark {

struct DevicePreset {
  std::string name;
  double available_gib = 0;   // memory a stage may plan with (before engine.memory_fraction)
  double copy_gb_per_s = 0;   // measured device-to-device copy bandwidth
  std::string about;          // where the numbers come from
};

// gb10, h100, or "<GiB>,<GB/s>"; InputError otherwise.
DevicePreset parse_device(const std::string& arg);

// The report for `stage` (plan_stage's) on the device; `fits` says whether the weights,
// workspace and at least one max_model_len sequence of KV fit.
std::string device_plan_report(const Config& config, const StagePlan& stage, const DevicePreset& device, bool& fits);

}  // namespace spark
