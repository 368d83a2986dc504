// decode_graphs.cu — bucketed capture and replay of decode steps.
#include "engine/backend/cuda/decode_graphs.h"

#include <algorithm>

#include "engine/backend/cuda/common.cuh"

namespace spark::cuda {

DecodeGraphs::DecodeGraphs(int32_t max_rows) {
  SPARK_CHECK(max_rows > 0, "decode graphs need at least one row");
  for (int32_t b : {1, 2, 4}) buckets_.push_back(b);
  for (int32_t b = 8; b <= 64; b += 8) buckets_.push_back(b);
  for (int32_t b = 80; buckets_.back() < max_rows; b += 16) buckets_.push_back(b);
  while (buckets_.size() > 1 && buckets_[buckets_.size() - 2] >= max_rows) buckets_.pop_back();
}

DecodeGraphs::~DecodeGraphs() {
  for (auto& [bucket, exec] : graphs_) cudaGraphExecDestroy(exec);
}

int32_t DecodeGraphs::bucket_for(int32_t rows) const {
  auto it = std::lower_bound(buckets_.begin(), buckets_.end(), rows);
  return it == buckets_.end() ? 0 : *it;
}

DecodeGraphs::Use DecodeGraphs::run(int32_t bucket, cudaStream_t stream, const std::function<void()>& work) {
  auto found = graphs_.find(bucket);
  if (found != graphs_.end()) {
    CUDA_CHECK(cudaGraphLaunch(found->second, stream));
    return Use::REPLAYED;
  }
  if (warmed_.insert(bucket).second) {
    work();
    return Use::EAGER;
  }
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    work();
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);  // leave the stream usable; the error goes on up
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // and the error state clean: that call fails for an invalidated capture
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(err);
  graphs_.emplace(bucket, exec);
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  return Use::CAPTURED;
}

}  // namespace spark::cuda
