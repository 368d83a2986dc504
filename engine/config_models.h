// config_models.h — what the config parser checks across [[models]] tables (config.cpp
// calls it after each model's own keys are read). The public helpers for several models
// (served_model_name, memory_share_of, model_run_config) are declared in config.h.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/config.h"

namespace spark {

// Throws the config error `what` at the first of the origin keys ("models.1.name",
// "peer.enabled", ...) that was set; never returns.
using FailAt = std::function<void(const std::string& what, const std::vector<std::string>& keys)>;

// Served names clients cannot tell apart, shares that overcommit the box, a pair ([peer])
// with several models: each refused through `fail_at`.
void validate_models(const Config& config, const FailAt& fail_at);

}  // namespace spark
