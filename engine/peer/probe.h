// probe.h — `sparkd check` asks the head of a pair how the pair is doing.
#pragma once
#include <string>

#include "engine/config.h"

namespace spark {

// One line: the head's view of the pair (state, worker, data path, round trip and
// bandwidth measured at pairing) and this probe's own round trip; or why the head at
// peer.head_addr could not be asked. Never throws for an unreachable head.
std::string probe_peer(const PeerConfig& config);

}  // namespace spark
