// device_info.cu — device discovery through the CUDA runtime.
#include <cuda_runtime.h>

#include "engine/backend/cuda/device_info.h"

namespace spark {

std::vector<CudaDeviceInfo> cuda_devices(std::string* why) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error so later calls are not poisoned
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    CudaDeviceInfo info;
    info.index = i;
    info.name = prop.name;
    info.cc_major = prop.major;
    info.cc_minor = prop.minor;
    info.total_bytes = int64_t(prop.totalGlobalMem);
    info.integrated = prop.integrated != 0;
    info.sm_count = prop.multiProcessorCount;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      info.free_bytes = int64_t(free_b);
    out.push_back(info);
  }
  if (out.empty() && why) *why = "no CUDA device";
  return out;
}

}  // namespace spark
