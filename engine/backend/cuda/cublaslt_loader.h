// cublaslt_loader.h — cuBLASLt is loaded at run time (dlopen), not linked: the binary then
// starts on any box, and one without cuBLASLt gets a message naming the version it needs
// instead of a loader error. cublaslt_loader.cpp defines the cublasLt* functions sparkd calls
// as forwarders into the loaded library, so callers use <cublasLt.h> as usual; a new call
// needs one forwarder there (the link fails until it has one).
#pragma once
#include <string>

namespace spark {

// The library sparkd is built against: cuBLASLt 13.x, part of CUDA 13.
inline constexpr const char* kCublasLtSoname = "libcublasLt.so.13";
inline constexpr int kCublasLtMajor = 13;

struct CublasLtStatus {
  std::string error;    // "" when loaded and every function sparkd calls was found
  std::string path;     // where the library was found
  size_t version = 0;   // cublasLtGetVersion(): major * 10000 + minor * 100 + patch
};

// Tries `soname` (then the default CUDA install) now; for tests and `sparkd version`.
CublasLtStatus probe_cublaslt(const char* soname = kCublasLtSoname);

}  // namespace spark
