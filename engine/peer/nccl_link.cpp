// nccl_link.cpp — activations over NCCL send/recv (rank 0 head, rank 1 worker). The
// communicator is created non-blocking and every wait polls its async error between
// the caller's liveness checks, so a dead peer turns into PeerLost and ncclCommAbort,
// never a hang. The stage boundary's 16-bit hidden states go from and into the CUDA
// backend's device buffers directly (send_device, recv_device); host buffers (the link
// test) are staged through device memory.
#include "engine/peer/link.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#if SPARKD_CUDA
#include <cuda_runtime.h>

#include "engine/peer/nccl_api.h"
#endif

namespace spark {

void require_nccl_backend(const Backend& backend) {
  if (!backend.boundary_on_device())
    throw InputError("peer.transport = \"nccl\" carries the hidden states in device memory, and this box's backend (" +
                     backend.describe() + ") keeps them on the host: use engine.backend = \"cuda\", or \"tcp\"");
}

#if SPARKD_CUDA

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw PeerLost(std::string(what) + ": " + cudaGetErrorString(e));
}

class NcclLink : public Link {
 public:
  NcclLink(const PeerConfig& config, int rank, const std::vector<uint8_t>& unique_id) : api_(nccl()), rank_(rank) {
    if (unique_id.size() != sizeof(ncclUniqueId))
      throw InputError("NCCL unique id of " + std::to_string(unique_id.size()) + " bytes, expected " +
                       std::to_string(sizeof(ncclUniqueId)));
    // NCCL reads its interface choice from the environment at communicator creation.
    if (!config.nccl_ifname.empty()) setenv("NCCL_SOCKET_IFNAME", config.nccl_ifname.c_str(), 1);
    if (!config.nccl_ib_hca.empty()) setenv("NCCL_IB_HCA", config.nccl_ib_hca.c_str(), 1);
    ncclUniqueId id;
    std::memcpy(&id, unique_id.data(), sizeof id);
    cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t rc = api_.CommInitRankConfig(&comm_, 2, id, rank_, &cfg);
    if (rc != ncclSuccess && rc != ncclInProgress)
      throw PeerLost(std::string("ncclCommInitRankConfig: ") + api_.GetErrorString(rc));
    const SteadyTime deadline = steady_after(config.timeout_s);
    wait_comm([deadline] {
      if (std::chrono::steady_clock::now() > deadline) throw PeerLost("the NCCL communicator did not come up within peer.timeout_s");
    });
  }

  ~NcclLink() override {
    if (comm_) {
      if (aborted_) api_.CommAbort(comm_);
      else api_.CommDestroy(comm_);
    }
    if (buffer_) cudaFree(buffer_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string describe() const override { return "nccl rank " + std::to_string(rank_); }

  void send(const float* data, size_t count, const WaitCheck& check) override {
    reserve(count);
    cuda_ok(cudaMemcpyAsync(buffer_, data, count * sizeof(float), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    enqueue([&](ncclComm_t comm) { return api_.Send(buffer_, count, ncclFloat, 1 - rank_, comm, stream_); }, check);
    wait_stream(check);
  }

  void recv(float* data, size_t count, const WaitCheck& check) override {
    reserve(count);
    enqueue([&](ncclComm_t comm) { return api_.Recv(buffer_, count, ncclFloat, 1 - rank_, comm, stream_); }, check);
    cuda_ok(cudaMemcpyAsync(data, buffer_, count * sizeof(float), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    wait_stream(check);
  }

  bool moves_device_memory() const override { return true; }

  void send_device(const DeviceHidden& h, const WaitCheck& check) override {
    enqueue([&](ncclComm_t comm) { return api_.Send(h.data, h.count, type_of(h), 1 - rank_, comm, stream_); }, check);
    wait_stream(check);
  }

  void recv_device(const DeviceHidden& h, const WaitCheck& check) override {
    enqueue([&](ncclComm_t comm) { return api_.Recv(h.data, h.count, type_of(h), 1 - rank_, comm, stream_); }, check);
    wait_stream(check);
  }

  // Another thread may be polling the communicator: the lock keeps ncclCommAbort (which
  // frees it) from running under a call on it.
  void abort() override {
    std::lock_guard lock(comm_mu_);
    if (!aborted_.exchange(true) && comm_) api_.CommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  void reserve(size_t count) {
    if (count <= capacity_) return;
    if (buffer_) cudaFree(buffer_);
    buffer_ = nullptr;
    cuda_ok(cudaMalloc(&buffer_, count * sizeof(float)), "cudaMalloc for the NCCL staging buffer");
    capacity_ = count;
  }
  static ncclDataType_t type_of(const DeviceHidden& h) { return h.bf16 ? ncclBfloat16 : ncclHalf; }
  template <typename Check>
  void wait_comm(const Check& check) {
    for (;;) {
      ncclResult_t state;
      {
        std::lock_guard lock(comm_mu_);
        if (aborted_) throw PeerLost("the link was aborted");
        api_.CommGetAsyncError(comm_, &state);
      }
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) throw PeerLost(std::string("NCCL: ") + api_.GetErrorString(state));
      check();
      struct timespec ts{0, 200000};
      nanosleep(&ts, nullptr);
    }
  }
  // Issues one call on the communicator (not after an abort) and waits until it is enqueued.
  template <typename Call>
  void enqueue(const Call& call, const WaitCheck& check) {
    ncclResult_t rc;
    {
      std::lock_guard lock(comm_mu_);
      if (aborted_) throw PeerLost("the link was aborted");
      rc = call(comm_);
    }
    if (rc != ncclSuccess && rc != ncclInProgress) throw PeerLost(std::string("NCCL: ") + api_.GetErrorString(rc));
    wait_comm([&] { if (check) check(); });
  }
  void wait_stream(const WaitCheck& check) {
    for (;;) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) cuda_ok(e, "NCCL stream");
      wait_comm([&] { if (check) check(); });
      struct timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    }
  }

  const NcclApi& api_;
  int rank_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* buffer_ = nullptr;
  size_t capacity_ = 0;
  std::mutex comm_mu_;
  std::atomic<bool> aborted_{false};
};

}  // namespace

void require_nccl() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
    throw InputError("peer.transport = \"nccl\" needs an NVIDIA GPU on this box; use \"tcp\"");
  nccl();
}

std::vector<uint8_t> nccl_unique_id() {
  const NcclApi& api = nccl();
  ncclUniqueId id;
  ncclResult_t rc = api.GetUniqueId(&id);
  if (rc != ncclSuccess) throw RuntimeError(std::string("ncclGetUniqueId: ") + api.GetErrorString(rc));
  return std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&id), reinterpret_cast<uint8_t*>(&id) + sizeof id);
}

std::unique_ptr<Link> make_nccl_link(const PeerConfig& config, int rank, const std::vector<uint8_t>& unique_id) {
  return std::make_unique<NcclLink>(config, rank, unique_id);
}

#else  // a CPU-only build

void require_nccl() {
  throw InputError("peer.transport = \"nccl\" needs a sparkd built with CUDA; this build has none (use \"tcp\")");
}

std::vector<uint8_t> nccl_unique_id() {
  require_nccl();  // throws
  return {};
}

std::unique_ptr<Link> make_nccl_link(const PeerConfig&, int, const std::vector<uint8_t>&) {
  require_nccl();  // throws
  return nullptr;
}

#endif

}  // namespace spark
