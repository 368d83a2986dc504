// device_info.h — the CUDA devices of this machine, without CUDA headers for the caller.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace spark {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
  bool integrated = false;  // shares memory with the CPU (GB10): budget from MemAvailable
  int sm_count = 0;
};

// Empty when there is no driver or no device; `why` says which.
std::vector<CudaDeviceInfo> cuda_devices(std::string* why = nullptr);

}  // namespace spark
