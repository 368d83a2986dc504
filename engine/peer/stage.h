// stage.h — the later pipeline stage as the engine sees it. The engine on the head
// runs the first layers and hands each micro-batch to a RemoteStage, which returns the
// sampled tokens in order. No sockets here: the engine knows the pair only through this.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/peer/messages.h"

namespace spark {

// Wall-clock microseconds, comparable between the boxes of a pair (NTP-synced) and
// between processes of one box.
int64_t wall_us();

// A micro-batch's hidden states: f32 on the host, or, for a link that moves device memory
// (takes_device_hidden), 16-bit on the device where the first stage left them.
struct StageHidden {
  std::span<const float> host;
  DeviceHidden device;
};

class RemoteStage {
 public:
  virtual ~RemoteStage() = default;
  // "" while the pair is up and takes micro-batches, else why not (for /health and
  // for refusing new requests).
  virtual std::string problem() const = 0;
  // Which pairing is current: it changes when the worker reconnects, and with it every
  // KV block and sequence the worker held is gone. 0 while none is up.
  virtual uint64_t session() const = 0;
  // Whether send() wants the hidden states on the device (StageHidden::device).
  virtual bool takes_device_hidden() const { return false; }
  // Sends one micro-batch: its plan and the hidden states of its rows. head_start_us /
  // head_end_us are when this box computed them (the pipeline timeline). Throws PeerLost.
  // `session` is the pairing the engine planned for: a send into another throws PeerLost.
  virtual void send(uint64_t session, const MicroBatchPlan& plan, const StageHidden& hidden, int64_t head_start_us,
                    int64_t head_end_us) = 0;
  // The result of the oldest micro-batch sent and not yet received, of `rows` samples and
  // `hidden_values` hidden-state values; waits as long as the peer is alive. Throws
  // PeerLost (also for a malformed or out-of-order result).
  virtual StepResult receive(uint64_t plan_id, size_t rows, size_t hidden_values) = 0;
};

}  // namespace spark
