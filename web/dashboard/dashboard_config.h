// dashboard_config.h — the effective configuration as the dashboard shows it, secrets redacted.
#pragma once
#include <nlohmann/json.hpp>

#include "engine/config.h"

namespace spark {

// Every section and key of the config. API keys are replaced by a count; the key file's
// path is shown (it says where keys live) but never its contents.
nlohmann::json redacted_config(const Config& config);

}  // namespace spark
