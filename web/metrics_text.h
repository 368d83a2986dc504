// metrics_text.h — the Prometheus text exposition of /metrics: sparkd_* metrics and the
// vllm:* names that existing Grafana dashboards query, labelled with model_name and, so
// that one Prometheus can scrape a fleet of replicas, replica.
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

// `replica` "" leaves the replica label out.
std::string metrics_text(const MetricsSnapshot& m, const ServerGauges& server, const std::string& model_name,
                         const std::string& replica);

}  // namespace spark
