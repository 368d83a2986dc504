// test_device_plan.cpp — `sparkd check --device`: device names and numbers, and the
// report for the tiny Q4_K_M model (its weights against the file's, the projection).
#include <doctest/doctest.h>

#include <string>

#include "engine/commands/device_plan.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;
using spark::testing::input_error_of;

TEST_CASE("device plan: gb10, h100 and GiB,GB/s; anything else is refused") {
  CHECK(parse_device("gb10").copy_gb_per_s == 218);
  CHECK(parse_device("h100").copy_gb_per_s == 3000);
  const DevicePreset custom = parse_device("96,400");
  CHECK(custom.available_gib == 96);
  CHECK(custom.copy_gb_per_s == 400);
  for (const char* bad : {"", "gb11", "96", "96,", ",400", "96,400x", "-1,400", "96,0", "nan,400"})
    CHECK(input_error_of([&] { parse_device(bad); }).find("--device must be") != std::string::npos);
}

TEST_CASE("device plan: the tiny Q4_K_M model fits a GB10 and gets a projected decode rate") {
  const Config config = config_for_model("tests/golden/models/llama_q4_k_m/model.gguf");
  const StagePlan stage = plan_stage(config);
  bool fits = false;
  const std::string report = device_plan_report(config, stage, parse_device("gb10"), fits);
  CHECK(fits);
  CHECK(report.find("a projection: no GPU is used") != std::string::npos);
  CHECK(report.find("the file's tensors:") != std::string::npos);
  CHECK(report.find("tokens/s at batch 1") != std::string::npos);
  // 1 MiB of memory cannot hold the workspace.
  bool small_fits = true;
  device_plan_report(config, stage, parse_device("0.001,100"), small_fits);
  CHECK_FALSE(small_fits);
}
