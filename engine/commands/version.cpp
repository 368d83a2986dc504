// version.cpp — `sparkd version`: the version, what the binary was built for (CPU
// architecture, CUDA architectures), how it was linked, and what it loads at run time.
#include <link.h>

#include <cstdio>
#include <string>

#include "engine/commands/commands.h"
#include "engine/util/check.h"
#include "engine/util/version.h"
#if SPARKD_CUDA
#include "engine/backend/cuda/cublaslt_loader.h"
#include "engine/backend/cuda/device_info.h"
#endif

#ifndef SPARKD_TARGET_ARCH
#define SPARKD_TARGET_ARCH "unknown"
#endif
#ifndef SPARKD_CUDA_ARCHS
#define SPARKD_CUDA_ARCHS ""
#endif
#ifndef SPARKD_STATIC_LIBS
#define SPARKD_STATIC_LIBS "unknown"
#endif

namespace spark {
namespace {

// The CPU features the compiler was allowed to use (the CPU backend's SIMD paths follow them).
std::string cpu_features() {
  std::string f;
#if defined(__aarch64__)
  f = "aarch64";
#if defined(__ARM_NEON)
  f += " neon";
#endif
#if defined(__ARM_FEATURE_DOTPROD)
  f += " dotprod";
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
  f += " i8mm";
#endif
#elif defined(__x86_64__)
  f = "x86_64; AVX2/FMA kernels picked at run time";
#endif
  return f;
}

// The shared objects mapped into this process now: glibc's parts, the vDSO, and whatever was
// loaded at run time so far.
std::string shared_objects() {
  std::string out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.empty()) return 0;  // the executable itself
        auto* list = static_cast<std::string*>(data);
        *list += (list->empty() ? "" : ", ") + name.substr(name.find_last_of('/') + 1);
        return 0;
      },
      &out);
  return out;
}

}  // namespace

int run_version(const Args& args) {
  if (!args.empty()) throw InputError("version takes no arguments");
  std::printf("sparkd %s\n", version_string().c_str());
  std::printf("target: %s (%s)\n", SPARKD_TARGET_ARCH, cpu_features().c_str());
#if SPARKD_CUDA
  std::printf("cuda: built in for sm_%s\n", [] {
    std::string archs = SPARKD_CUDA_ARCHS, out;
    for (char c : archs) out += c == ' ' ? std::string(", sm_") : std::string(1, c);
    return out;
  }().c_str());
#else
  std::printf("cuda: not built (CPU only)\n");
#endif
  std::printf("linked: statically %s; dynamically glibc only\n", SPARKD_STATIC_LIBS);
#if SPARKD_CUDA
  std::string why;
  auto devices = cuda_devices(&why);
  std::printf("loaded at run time:\n  libcuda.so.1 (the driver's): %s\n", devices.empty() ? ("no device usable: " + why).c_str() : "loaded");
  for (const auto& d : devices)
    std::printf("    [%d] %s, sm_%d%d, %.1f GiB%s\n", d.index, d.name.c_str(), d.cc_major, d.cc_minor,
                double(d.total_bytes) / (1 << 30), d.integrated ? ", unified memory" : "");
#if !defined(SPARK_CUDA_EMU)
  CublasLtStatus lt = probe_cublaslt();
  if (lt.error.empty())
    std::printf("  cuBLASLt %zu.%zu.%zu: %s\n", lt.version / 10000, lt.version / 100 % 100, lt.version % 100,
                lt.path.c_str());
  else
    std::printf("  cuBLASLt: %s\n", lt.error.c_str());
#endif
#endif
  std::printf("shared objects now: %s\n", shared_objects().c_str());
  std::printf("compiler: g++ %s, C++%ld\n", __VERSION__, long(__cplusplus / 100 % 100));
  return 0;
}

}  // namespace spark
