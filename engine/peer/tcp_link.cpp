// tcp_link.cpp — activations as frames on the TCP data connection.
#include <atomic>

#include "engine/peer/frame.h"
#include "engine/peer/link.h"

namespace spark {

namespace {

class TcpLink : public Link {
 public:
  explicit TcpLink(const Socket& data) : data_(data) {}

  std::string describe() const override { return "tcp " + data_.remote(); }

  void send(const float* data, size_t count, const WaitCheck& check) override {
    guard(check);
    write_frame(data_, FrameType::ACTIVATIONS, data, count * sizeof(float), kNoDeadline, [&] { guard(check); });
  }

  void recv(float* data, size_t count, const WaitCheck& check) override {
    const size_t bytes = count * sizeof(float);
    FrameHeader h = read_header(data_, bytes, kNoDeadline, [&] { guard(check); });
    if (h.type != FrameType::ACTIVATIONS || h.length != bytes)
      throw PeerLost("peer sent " + std::string(frame_type_name(h.type)) + " of " + std::to_string(h.length) +
                     " bytes where " + std::to_string(bytes) + " bytes of activations were expected");
    recv_bytes(data_, data, bytes, kNoDeadline, [&] { guard(check); });
  }

  void abort() override { aborted_ = true; }

 private:
  void guard(const WaitCheck& check) {
    if (aborted_) throw PeerLost("the link was aborted");
    if (check) check();
  }
  const Socket& data_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

std::unique_ptr<Link> make_tcp_link(const Socket& data) { return std::make_unique<TcpLink>(data); }

}  // namespace spark
