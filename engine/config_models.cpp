// config_models.cpp — several models in one config: the name each is served under, its
// share of the box's memory budget, the Config it runs with, and the checks across models.
#include "engine/config_models.h"

#include <algorithm>
#include <cstdio>

#include "engine/util/check.h"

namespace spark {

// What only several models can get wrong: names clients cannot tell apart, shares that
// overcommit the box, a pair (which splits one model's layers over two boxes).
void validate_models(const Config& c, const FailAt& fail_at) {
  const size_t n = c.models.size();
  auto at = [](size_t i, const std::string& key) {
    return "models." + std::to_string(i) + (key.empty() ? "" : "." + key);
  };
  if (c.peer.enabled && n > 1)
    fail_at("[peer] enabled = true runs one model split over two boxes, but [[models]] lists " + std::to_string(n) +
                "; serve several models on one box, or one model as a pair",
            {"peer.enabled", "models"});
  for (size_t j = 1; j < n; ++j)
    for (size_t i = 0; i < j; ++i)
      if (served_model_name(c.models[i]) == served_model_name(c.models[j]))
        fail_at("[[models]]: two models are served as '" + served_model_name(c.models[j]) +
                    "'; give each a different name (clients choose a model by it)",
                {at(j, "name"), at(j, "path"), at(j, "")});
  double set_total = 0;
  size_t unset = 0, last_set = 0;
  for (size_t i = 0; i < n; ++i) {
    if (c.models[i].memory_share > 0)
      set_total += c.models[i].memory_share, last_set = i;
    else
      ++unset;
  }
  char total[32];
  std::snprintf(total, sizeof total, "%g", set_total);
  if (set_total > 1 + 1e-9)
    fail_at(std::string("[[models]] memory_share: the shares add up to ") + total +
                ", more than the whole budget (1 = MemAvailable x engine.memory_fraction); lower them",
            {at(last_set, "memory_share")});
  if (unset > 0 && set_total > 1 - 1e-9)
    fail_at(std::string("[[models]] memory_share: the set shares add up to ") + total + ", leaving nothing for the " +
                std::to_string(unset) + " model(s) without one; lower them or give every model its share",
            {at(last_set, "memory_share")});
}

std::string served_model_name(const ModelConfig& model) {
  if (!model.name.empty()) return model.name;
  std::string path = model.path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  // A GGUF is served under its file name without the extension, as clients name models;
  // requests may still give the full file name (check_model).
  const std::string ext = ".gguf";
  if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
    name.resize(name.size() - ext.size());
  return name;
}

double memory_share_of(const Config& config, size_t index) {
  if (config.models.size() <= 1)
    return config.models.empty() || config.models[0].memory_share <= 0 ? 1.0 : config.models[0].memory_share;
  SPARK_CHECK(index < config.models.size());
  if (config.models[index].memory_share > 0) return config.models[index].memory_share;
  double set_total = 0;
  size_t unset = 0;
  for (const ModelConfig& m : config.models) {
    if (m.memory_share > 0)
      set_total += m.memory_share;
    else
      ++unset;
  }
  return std::max(0.0, 1.0 - set_total) / double(unset);
}

Config model_run_config(const Config& config, size_t index) {
  Config run = config;
  if (!config.models.empty()) {
    SPARK_CHECK(index < config.models.size());
    run.model = config.models[index];
  }
  run.engine.memory_fraction = config.engine.memory_fraction * memory_share_of(config, index);
  // The share is now in memory_fraction: running this again must not scale it twice.
  run.model.memory_share = 0;
  run.models = {run.model};
  return run;
}

}  // namespace spark
