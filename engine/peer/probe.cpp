// probe.cpp — a PROBE frame to the head's control port and its one-line answer.
#include "engine/peer/probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "engine/peer/frame.h"
#include "engine/peer/messages.h"
#include "engine/peer/socket.h"

namespace spark {

std::string probe_peer(const PeerConfig& config) {
  try {
    const Endpoint head = parse_endpoint(config.head_addr, "peer.head_addr");
    const SteadyTime deadline = steady_after(std::min(config.timeout_s, 5.0));
    auto t0 = std::chrono::steady_clock::now();
    Socket s = connect_to(head, deadline);
    write_frame(s, FrameType::PROBE, {}, deadline);
    std::string reply = decode_text(expect_frame(s, FrameType::PROBE_REPLY, kMaxControlPayload, deadline).payload);
    char rtt[64];
    std::snprintf(rtt, sizeof rtt, " [probe round trip %.3f ms]",
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    return reply + rtt;
  } catch (const std::exception& e) {
    return "the head at " + config.head_addr + " could not be asked: " + e.what();
  }
}

}  // namespace spark
