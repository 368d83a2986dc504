// metrics_text.h — the Prometheus text exposition of /metrics: sparkd_* metrics and the
// vllm:* names that existing Grafana dashboards query, labelled with model_name.
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/metrics.h"

namespace spark {

struct ServerGauges {
  int64_t http_in_flight = 0;   // API requests being served (drain waits for these)
  int64_t sequences_admitted = 0;  // engine sequences the API holds (the 429 count)
  bool ready = false;
};

std::string metrics_text(const MetricsSnapshot& m, const ServerGauges& server, const std::string& model_name);

}  // namespace spark
