// version.cpp — `sparkd version`: the version, the build's CUDA support and the compiler.
#include <cstdio>

#include "engine/commands/commands.h"
#include "engine/util/check.h"
#include "engine/util/version.h"
#if SPARKD_CUDA
#include "engine/backend/cuda/device_info.h"
#endif

namespace spark {

int run_version(const Args& args) {
  if (!args.empty()) throw InputError("version takes no arguments");
  std::printf("sparkd %s\n", version_string().c_str());
#if SPARKD_CUDA
  std::string why;
  auto devices = cuda_devices(&why);
  std::printf("cuda: built in; %s\n", devices.empty() ? ("no device usable: " + why).c_str() : "devices:");
  for (const auto& d : devices)
    std::printf("  [%d] %s, sm_%d%d, %.1f GiB%s\n", d.index, d.name.c_str(), d.cc_major, d.cc_minor,
                double(d.total_bytes) / (1 << 30), d.integrated ? ", unified memory" : "");
#else
  std::printf("cuda: not built (CPU only)\n");
#endif
  std::printf("compiler: g++ %s, C++%ld\n", __VERSION__, long(__cplusplus / 100 % 100));
  return 0;
}

}  // namespace spark
