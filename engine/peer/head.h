// head.h — the head's side of a pair: listens on peer.head_addr, checks each worker's
// HELLO against its own identity, opens the data path, keeps heartbeats both ways and
// declares the worker lost within peer.timeout_s. It is the engine's RemoteStage.
#pragma once
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/config.h"
#include "engine/peer/link.h"
#include "engine/peer/messages.h"
#include "engine/peer/socket.h"
#include "engine/peer/stage.h"

namespace spark {

// One micro-batch's trip through the pipeline, for the dashboard and the tests.
struct PipelineTiming {
  uint64_t id = 0;
  int32_t tokens = 0;
  int64_t head_start_us = 0, head_end_us = 0, worker_start_us = 0, worker_end_us = 0;
};

struct PeerStatus {
  std::string state = "waiting";  // "waiting" (never paired), "up", "down" (lost), "refused"
  std::string worker;             // address of the worker (last one seen)
  std::string reason;             // why not up; "" when up
  std::string link;               // the data path, e.g. "tcp 10.0.0.2:41234"
  double rtt_ms = -1;             // measured at pairing; -1 unknown
  double link_bytes_per_s = -1;   // activations bandwidth measured at pairing
  uint64_t pairings = 0;
  uint64_t tx_bytes = 0, rx_bytes = 0;  // data path, this process's lifetime
  // The hidden states among tx_bytes, and the token rows they carried: bytes per token
  // are 2 x hidden_size on a link that moves 16-bit device memory, 4 x on the host path.
  uint64_t hidden_bytes = 0, hidden_tokens = 0;
};

class PeerHead : public RemoteStage {
 public:
  // identity: this box's (kv_blocks: the blocks its tables address). limits: the
  // session parameters every worker gets (session id and NCCL id are drawn per pairing).
  PeerHead(const PeerConfig& config, PeerIdentity identity, Welcome limits);
  ~PeerHead() override;
  PeerHead(const PeerHead&) = delete;
  PeerHead& operator=(const PeerHead&) = delete;

  void start();  // binds peer.head_addr (RuntimeError when it cannot) and starts accepting
  void stop();

  std::string problem() const override;
  uint64_t session() const override;
  bool takes_device_hidden() const override { return config_.transport == "nccl"; }
  void send(uint64_t session, const MicroBatchPlan& plan, const StageHidden& hidden, int64_t head_start_us,
            int64_t head_end_us) override;
  StepResult receive(uint64_t plan_id, size_t rows, size_t hidden_values) override;

  PeerStatus status() const;
  std::vector<PipelineTiming> timeline() const;  // oldest first, at most the last 256

 private:
  struct Session;
  void run();
  void on_connection(Socket s);
  void pair(Socket control, const PeerIdentity& worker);
  void watch(std::shared_ptr<Session> s);
  void lose(Session& s, const std::string& why);
  std::shared_ptr<Session> current(uint64_t expected) const;
  void refuse(const Socket& s, const std::string& reason) const;
  std::string probe_text() const;

  const PeerConfig config_;
  const PeerIdentity identity_;
  const Welcome limits_;
  Endpoint endpoint_;
  Socket listener_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;

  mutable std::mutex mu_;
  std::shared_ptr<Session> session_;              // the live pairing, or null
  std::vector<std::shared_ptr<Session>> ended_;   // lost pairings whose threads are joined later
  PeerStatus status_;
  std::deque<PipelineTiming> timeline_;
};

}  // namespace spark
