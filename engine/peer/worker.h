// worker.h — `sparkd serve` with peer.role = "worker": loads the later layers, connects
// to the head at peer.head_addr and runs its micro-batches (layers, final norm, LM head,
// sampling) until the head goes away; then reconnects. Never serves HTTP.
#pragma once
#include <atomic>

#include "engine/config.h"

namespace spark {

// Returns the exit code: 0 after `stop` turns true, 2 when the head refuses this box
// for a configuration mismatch (the message names both sides' values).
int run_worker(const Config& config, const std::atomic<bool>& stop);

}  // namespace spark
