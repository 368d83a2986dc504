// decode_graphs.h — CUDA graphs for decode steps at bucketed sizes: a step of n one-row
// sequences is padded to the next bucket and replays that bucket's graph, so the ~10
// launches per layer cost one launch. Nothing is allocated during capture (every buffer
// the layers use is the backend's, at fixed addresses), so a graph holds no memory pool:
// its cost is the driver's node storage, about 10 kernel nodes per layer per bucket.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

namespace spark::cuda {

class DecodeGraphs {
 public:
  // How run() queued a step's layers.
  enum class Use { EAGER, CAPTURED, REPLAYED };

  // Buckets 1, 2, 4, 8, then every 8 up to 64, then every 16, up to max_rows rounded up.
  explicit DecodeGraphs(int32_t max_rows);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // The padded size of a step of `rows` one-row sequences; 0 when it exceeds every bucket.
  int32_t bucket_for(int32_t rows) const;
  int32_t largest_bucket() const { return buckets_.back(); }
  const std::vector<int32_t>& buckets() const { return buckets_; }

  // Queues `work` (the layers of a decode step padded to `bucket`) on `stream`. The first
  // use of a bucket runs it eagerly, so one-time set-up (cuBLASLt's algorithm search)
  // stays out of the graph; the second captures it; later uses replay the graph. `work`
  // must read its inputs only from device buffers whose addresses never change. The
  // backend makes the first two uses of every bucket at start-up (CudaBackend::warm_up).
  Use run(int32_t bucket, cudaStream_t stream, const std::function<void()>& work);

 private:
  std::vector<int32_t> buckets_;
  std::set<int32_t> warmed_;
  std::map<int32_t, cudaGraphExec_t> graphs_;
};

}  // namespace spark::cuda
