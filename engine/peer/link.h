// link.h — the data path that carries activations from the head to the worker. Two
// implementations: TCP (CPU backend, tests) and NCCL send/recv (CUDA boxes on the 200G
// link). Plans and results always travel on the TCP data connection beside it.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config.h"
#include "engine/peer/socket.h"

namespace spark {

class Link {
 public:
  virtual ~Link() = default;
  virtual std::string describe() const = 0;  // "tcp 10.0.0.2:41234", "nccl (mlx5_0,mlx5_1)"
  // Exactly `count` floats, in order; waits while `check` passes. Throws PeerLost.
  virtual void send(const float* data, size_t count, const WaitCheck& check) = 0;
  virtual void recv(float* data, size_t count, const WaitCheck& check) = 0;
  // A link that moves device memory (NCCL) also carries 16-bit hidden states from and
  // into device buffers (Backend::forward_to_boundary, boundary_input), with no host copy.
  virtual bool moves_device_memory() const { return false; }
  virtual void send_device(const DeviceHidden& hidden, const WaitCheck& check) {
    SPARK_CHECK(false, "send_device on a link that moves host memory");
  }
  virtual void recv_device(const DeviceHidden& hidden, const WaitCheck& check) {
    SPARK_CHECK(false, "recv_device on a link that moves host memory");
  }
  // Makes blocked and later calls fail at once; never blocks (a dead peer must not
  // hang the box): NCCL communicators are aborted here, never destroyed while blocked.
  virtual void abort() = 0;
};

// Activations as ACTIVATIONS frames on the data connection, which the link shares with
// plans and results (it does not own it).
std::unique_ptr<Link> make_tcp_link(const Socket& data);

// NCCL: rank 0 is the head, rank 1 the worker. The unique id comes from the head
// (nccl_unique_id) over the control channel. peer.nccl_ifname / nccl_ib_hca pick the
// interfaces. Throws InputError in a build without CUDA or on a box without a GPU or
// NCCL (loaded at run time, nccl_api.h), PeerLost when the communicator does not come up
// within timeout_s.
void require_nccl();  // InputError, saying what is missing, unless a pair can use NCCL here
// NCCL carries the hidden states in device memory (Backend::boundary_on_device): InputError
// for a backend that keeps them on the host.
void require_nccl_backend(const Backend& backend);
std::vector<uint8_t> nccl_unique_id();
std::unique_ptr<Link> make_nccl_link(const PeerConfig& config, int rank, const std::vector<uint8_t>& unique_id);

}  // namespace spark
