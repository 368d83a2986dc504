// nccl_api.cpp — dlopen of libnccl.so.2 (nccl_api.h).
#include "engine/peer/nccl_api.h"

#if SPARKD_CUDA
#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "engine/util/check.h"

namespace spark {
namespace {

struct Loaded {
  NcclApi api{};
  std::string error;  // empty when every function was found
};

Loaded load() {
  Loaded l;
  // The handle stays open for the life of the process: communicators may outlive any scope.
  void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    l.error = std::string("peer.transport = \"nccl\" needs NCCL, and libnccl.so.2 could not be loaded (") +
              (why ? why : "not found") + "): install NCCL (Debian and Ubuntu: libnccl2), or use \"tcp\"";
    return l;
  }
  auto find = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn && l.error.empty())
      l.error = std::string("libnccl.so.2 has no ") + name + ": this NCCL is too old for peer.transport = \"nccl\"";
  };
  find(l.api.GetUniqueId, "ncclGetUniqueId");
  find(l.api.CommInitRankConfig, "ncclCommInitRankConfig");
  find(l.api.CommGetAsyncError, "ncclCommGetAsyncError");
  find(l.api.CommDestroy, "ncclCommDestroy");
  find(l.api.CommAbort, "ncclCommAbort");
  find(l.api.Send, "ncclSend");
  find(l.api.Recv, "ncclRecv");
  find(l.api.GetErrorString, "ncclGetErrorString");
  return l;
}

}  // namespace

const NcclApi& nccl() {
  static const Loaded loaded = load();
  if (!loaded.error.empty()) throw InputError(loaded.error);
  return loaded.api;
}

}  // namespace spark
#endif
