// metrics_text.h — the Prometheus text exposition of /metrics: sparkd_* metrics and the
// vllm:* names that existing Grafana dashboards query, labelled with model_name and, so
// that one Prometheus can scrape a fleet of replicas, replica.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/metrics.h"

namespace spark {

struct ServerGauges {
  int64_t http_in_flight = 0;   // API requests being served (drain waits for these)
  int64_t sequences_admitted = 0;  // engine sequences the API holds (the 429 count)
  bool ready = false;
};

// One served model's numbers and the name its series carry.
struct ModelMetrics {
  MetricsSnapshot snapshot;
  ServerGauges server;
  std::string model_name;
};

// Every model's series in one exposition: each family's # HELP and # TYPE once, then the
// samples of each model (Prometheus refuses a family described twice). `replica` "" leaves
// the replica label out.
std::string metrics_text(const std::vector<ModelMetrics>& models, const std::string& replica);
// One model.
std::string metrics_text(const MetricsSnapshot& m, const ServerGauges& server, const std::string& model_name,
                         const std::string& replica);

}  // namespace spark
