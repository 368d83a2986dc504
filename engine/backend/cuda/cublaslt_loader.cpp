// cublaslt_loader.cpp — dlopen of cuBLASLt and the forwarders sparkd's calls link to
// (cublaslt_loader.h).
#include "engine/backend/cuda/cublaslt_loader.h"

// The CUDA emulator of the GPU checks brings its own cuBLASLt (tests/gpu/emu).
#if SPARKD_CUDA && !defined(SPARK_CUDA_EMU)
#include <cublasLt.h>
#include <dlfcn.h>
#include <link.h>

#include "engine/util/check.h"

namespace spark {
namespace {

const char* const kSymbols[] = {
    "cublasLtCreate",           "cublasLtDestroy",
    "cublasLtGetStatusName",    "cublasLtGetStatusString",
    "cublasLtGetVersion",       "cublasLtMatmul",
    "cublasLtMatmulAlgoGetHeuristic", "cublasLtMatmulDescCreate",
    "cublasLtMatmulDescDestroy", "cublasLtMatmulDescSetAttribute",
    "cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy",
    "cublasLtMatmulPreferenceSetAttribute", "cublasLtMatrixLayoutCreate",
    "cublasLtMatrixLayoutDestroy",
};

std::string needs() {
  return "the CUDA backend needs cuBLASLt " + std::to_string(kCublasLtMajor) + ".x (" + kCublasLtSoname +
         ", from CUDA " + std::to_string(kCublasLtMajor) +
         "; on DGX OS and Ubuntu the libcublas-13-0 package of the CUDA repository, or the CUDA toolkit); "
         "install it where the dynamic loader finds it (ldconfig, or LD_LIBRARY_PATH), or set [engine] backend = \"cpu\"";
}

struct Library {
  void* handle = nullptr;
  CublasLtStatus status;
};

Library open_library(const char* soname) {
  Library lib;
  // The soname through the loader's search path first, then the toolkit's default place.
  std::string fallback = std::string("/usr/local/cuda/lib64/") + soname;
  std::string first_error;
  for (const std::string& name : {std::string(soname), fallback}) {
    lib.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) break;
    if (first_error.empty()) first_error = dlerror();
  }
  if (!lib.handle) {
    lib.status.error = soname + std::string(" could not be loaded (") + first_error + "): " + needs();
    return lib;
  }
  link_map* map = nullptr;
  if (dlinfo(lib.handle, RTLD_DI_LINKMAP, &map) == 0 && map) lib.status.path = map->l_name;
  for (const char* symbol : kSymbols)
    if (!dlsym(lib.handle, symbol)) {
      lib.status.error = lib.status.path + " has no " + symbol + ": " + needs();
      return lib;
    }
  auto version = reinterpret_cast<size_t (*)()>(dlsym(lib.handle, "cublasLtGetVersion"));
  lib.status.version = version();
  if (lib.status.version / 10000 != size_t(kCublasLtMajor))
    lib.status.error = lib.status.path + " is cuBLASLt " + std::to_string(lib.status.version / 10000) + "." +
                       std::to_string(lib.status.version / 100 % 100) + ": " + needs();
  return lib;
}

// The process's library: opened at the first call, kept open for the life of the process.
void* symbol(const char* name) {
  static const Library lib = open_library(kCublasLtSoname);
  if (!lib.status.error.empty()) throw RuntimeError(lib.status.error);
  return dlsym(lib.handle, name);
}

template <typename Fn>
Fn resolve(const char* name) {
  return reinterpret_cast<Fn>(symbol(name));
}

}  // namespace

CublasLtStatus probe_cublaslt(const char* soname) {
  Library lib = open_library(soname);
  if (lib.handle) dlclose(lib.handle);
  return lib.status;
}

}  // namespace spark

// The forwarders: each resolves its function once, at its first call.
#define SPARKD_CUBLASLT_FORWARD(name, ...)                                         \
  static const auto fn = ::spark::resolve<decltype(&name)>(#name); \
  return fn(__VA_ARGS__);

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) { SPARKD_CUBLASLT_FORWARD(cublasLtCreate, handle) }

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) { SPARKD_CUBLASLT_FORWARD(cublasLtDestroy, handle) }

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  SPARKD_CUBLASLT_FORWARD(cublasLtGetStatusName, status)
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  SPARKD_CUBLASLT_FORWARD(cublasLtGetStatusString, status)
}

size_t CUBLASWINAPI cublasLtGetVersion(void) { SPARKD_CUBLASLT_FORWARD(cublasLtGetVersion) }

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                           const void* A, cublasLtMatrixLayout_t Adesc, const void* B,
                                           cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                           cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                           cudaStream_t stream) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                          workspace, workspace_bytes, stream)
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t preference, int requested,
                                                           cublasLtMatmulHeuristicResult_t results[], int* returned) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference,
                          requested, results, returned)
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatmulDescCreate, desc, compute, scale)
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatmulDescDestroy, desc)
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t size) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute, desc, attr, buf, size)
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatmulPreferenceCreate, pref)
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatmulPreferenceDestroy, pref)
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t size) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, size)
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld)
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  SPARKD_CUBLASLT_FORWARD(cublasLtMatrixLayoutDestroy, layout)
}

}  // extern "C"
#endif
