// cuda_error.cu — turns a failed CUDA call into a RuntimeError with its place.
#include <string>

#include "engine/backend/cuda/common.cuh"

namespace spark::cuda {

void cuda_failed(cudaError_t err, const char* expr, const char* file, int line) {
  throw ::spark::RuntimeError(std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                              ") in " + expr + " at " + file + ":" + std::to_string(line));
}

}  // namespace spark::cuda
