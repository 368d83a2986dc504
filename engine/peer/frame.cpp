// frame.cpp — header encoding/validation and whole-frame reads and writes.
#include "engine/peer/frame.h"

#include <cstring>
#include <string>

#include "engine/peer/wire.h"

namespace spark {

std::string_view frame_type_name(FrameType t) {
  switch (t) {
    case FrameType::HELLO: return "HELLO";
    case FrameType::WELCOME: return "WELCOME";
    case FrameType::REFUSE: return "REFUSE";
    case FrameType::DATA_HELLO: return "DATA_HELLO";
    case FrameType::READY: return "READY";
    case FrameType::HEARTBEAT: return "HEARTBEAT";
    case FrameType::PING: return "PING";
    case FrameType::PONG: return "PONG";
    case FrameType::LINK_TEST: return "LINK_TEST";
    case FrameType::LINK_TEST_ACK: return "LINK_TEST_ACK";
    case FrameType::MICRO_BATCH: return "MICRO_BATCH";
    case FrameType::ACTIVATIONS: return "ACTIVATIONS";
    case FrameType::STEP_RESULT: return "STEP_RESULT";
    case FrameType::PROBE: return "PROBE";
    case FrameType::PROBE_REPLY: return "PROBE_REPLY";
  }
  return "?";
}

std::vector<uint8_t> encode_header(FrameType type, uint32_t length) {
  WireWriter w;
  w.u32(kPeerMagic);
  w.u32(uint32_t(kPeerProtocolVersion) | uint32_t(type) << 16);
  w.u32(length);
  w.u32(0);
  return w.take();
}

FrameHeader decode_header(const uint8_t* bytes, size_t max_payload) {
  WireReader r(bytes, kFrameHeaderBytes);
  uint32_t magic = r.u32("magic");
  if (magic != kPeerMagic) throw InputError("the other end is not a sparkd peer (its first bytes are not a sparkd frame)");
  uint32_t version_type = r.u32("version");
  uint16_t version = uint16_t(version_type & 0xffff), type = uint16_t(version_type >> 16);
  if (version != kPeerProtocolVersion)
    throw InputError("peer protocol version differs: the other side speaks version " + std::to_string(version) +
                     ", this sparkd speaks version " + std::to_string(kPeerProtocolVersion) +
                     "; run the same sparkd release on both boxes");
  if (type < uint16_t(FrameType::HELLO) || type > uint16_t(FrameType::PROBE_REPLY))
    throw InputError("peer frame of unknown type " + std::to_string(type));
  FrameHeader h{FrameType(type), r.u32("length")};
  if (r.u32("reserved") != 0) throw InputError("peer frame header has reserved bits set");
  if (h.length > max_payload)
    throw InputError("peer " + std::string(frame_type_name(h.type)) + " frame of " + std::to_string(h.length) +
                     " bytes is larger than the " + std::to_string(max_payload) + " allowed here");
  return h;
}

void write_frame(const Socket& s, FrameType type, const void* payload, size_t n, SteadyTime deadline,
                 const WaitCheck& check) {
  SPARK_CHECK(n <= UINT32_MAX, "peer frame too large to encode");
  auto header = encode_header(type, uint32_t(n));
  if (n <= 4096) {  // small frames in one write: one TCP segment, no Nagle interplay
    header.insert(header.end(), static_cast<const uint8_t*>(payload), static_cast<const uint8_t*>(payload) + n);
    send_bytes(s, header.data(), header.size(), deadline, check);
    return;
  }
  send_bytes(s, header.data(), header.size(), deadline, check);
  send_bytes(s, payload, n, deadline, check);
}

FrameHeader read_header(const Socket& s, size_t max_payload, SteadyTime deadline, const WaitCheck& check) {
  uint8_t bytes[kFrameHeaderBytes];
  recv_bytes(s, bytes, sizeof bytes, deadline, check);
  return decode_header(bytes, max_payload);
}

Frame read_frame(const Socket& s, size_t max_payload, SteadyTime deadline, const WaitCheck& check) {
  FrameHeader h = read_header(s, max_payload, deadline, check);
  Frame f{h.type, std::vector<uint8_t>(h.length)};
  recv_bytes(s, f.payload.data(), f.payload.size(), deadline, check);
  return f;
}

Frame expect_frame(const Socket& s, FrameType want, size_t max_payload, SteadyTime deadline, const WaitCheck& check) {
  Frame f = read_frame(s, max_payload, deadline, check);
  if (f.type == FrameType::REFUSE && want != FrameType::REFUSE) {
    WireReader r(f.payload);
    throw InputError("the peer refused: " + r.str("reason", kMaxControlPayload));
  }
  if (f.type != want)
    throw InputError("peer sent " + std::string(frame_type_name(f.type)) + " where " + std::string(frame_type_name(want)) +
                     " was expected");
  return f;
}

}  // namespace spark
