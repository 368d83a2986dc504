// frame.h — the peer protocol's framing: a fixed 16-byte header (magic, protocol
// version, type, payload length, reserved zero) before every payload. A header that is
// not ours, of another protocol version, of an unknown type or longer than the reader
// allows is refused before any payload byte is read.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/peer/socket.h"

namespace spark {

inline constexpr uint32_t kPeerMagic = 0x444b5053;  // "SPKD" as little-endian bytes
// 2: plans carry state_copies; 3: state checkpoints (more state copies, tail block copies)
inline constexpr uint16_t kPeerProtocolVersion = 3;
inline constexpr size_t kFrameHeaderBytes = 16;
inline constexpr size_t kMaxControlPayload = 64 << 10;  // handshake, heartbeats, probes

enum class FrameType : uint16_t {
  HELLO = 1,         // worker -> head: who I am (handshake)
  WELCOME = 2,       // head -> worker: accepted, with the session's parameters
  REFUSE = 3,        // either way: refused, with the reason naming both sides' values
  DATA_HELLO = 4,    // worker -> head on a second connection: the data path of a session
  READY = 5,         // worker -> head: KV allocated, data path open
  HEARTBEAT = 6,     // either way, on the control channel
  PING = 7,          // head -> worker: latency probe
  PONG = 8,          // worker -> head
  LINK_TEST = 9,     // head -> worker on the data path: bulk bytes for a bandwidth figure
  LINK_TEST_ACK = 10,
  MICRO_BATCH = 11,  // head -> worker: one micro-batch's plan
  ACTIVATIONS = 12,  // head -> worker: its hidden states (TCP data path)
  STEP_RESULT = 13,  // worker -> head: sampled tokens of a micro-batch
  PROBE = 14,        // `sparkd check` -> head: what is the pair's state?
  PROBE_REPLY = 15,
};
std::string_view frame_type_name(FrameType t);

struct FrameHeader {
  FrameType type = FrameType::HEARTBEAT;
  uint32_t length = 0;
};

std::vector<uint8_t> encode_header(FrameType type, uint32_t length);
// Throws InputError naming what is wrong (not a sparkd peer, protocol versions of both
// sides, unknown type, length over max_payload).
FrameHeader decode_header(const uint8_t* bytes, size_t max_payload);

struct Frame {
  FrameType type = FrameType::HEARTBEAT;
  std::vector<uint8_t> payload;
};

// One whole frame, header then payload. A socket has one writer at a time: the pairing
// thread, then the watcher on the control channel; the engine thread on the data path.
void write_frame(const Socket& s, FrameType type, const void* payload, size_t n, SteadyTime deadline,
                 const WaitCheck& check = {});
inline void write_frame(const Socket& s, FrameType type, const std::vector<uint8_t>& payload, SteadyTime deadline,
                        const WaitCheck& check = {}) {
  write_frame(s, type, payload.data(), payload.size(), deadline, check);
}
// Reads a header (waiting up to `deadline`) and then its payload.
Frame read_frame(const Socket& s, size_t max_payload, SteadyTime deadline, const WaitCheck& check = {});
FrameHeader read_header(const Socket& s, size_t max_payload, SteadyTime deadline, const WaitCheck& check = {});
// Reads the next frame and insists on its type; REFUSE turns into InputError with the
// peer's reason.
Frame expect_frame(const Socket& s, FrameType want, size_t max_payload, SteadyTime deadline,
                   const WaitCheck& check = {});

}  // namespace spark
