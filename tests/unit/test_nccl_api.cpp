// test_nccl_api.cpp — NCCL loaded at run time: every function, or an InputError that names
// the library and the package to install (the GPU-free part of peer.transport = "nccl").
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <filesystem>
#include <string>

#include "engine/peer/link.h"
#include "engine/peer/nccl_api.h"
#include "engine/util/check.h"

namespace {

// Independent probes of what this box has, so each test knows which outcome is right.
bool nccl_loadable() {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

bool nvidia_gpu_present() {
  std::error_code ec;
  if (std::filesystem::exists("/dev/nvidiactl", ec)) return true;
  return std::filesystem::is_directory("/proc/driver/nvidia/gpus", ec) &&
         !std::filesystem::is_empty("/proc/driver/nvidia/gpus", ec);
}

}  // namespace

#if SPARKD_CUDA
TEST_CASE("nccl(): all eight functions from libnccl.so.2, or a message naming it") {
  if (nccl_loadable()) {
    const spark::NcclApi& api = spark::nccl();
    const bool all = api.GetUniqueId && api.CommInitRankConfig && api.CommGetAsyncError && api.CommDestroy &&
                     api.CommAbort && api.Send && api.Recv && api.GetErrorString;
    REQUIRE(all);
    CHECK(std::string(api.GetErrorString(ncclInvalidArgument)).size() > 0);
    CHECK(&spark::nccl() == &api);  // loaded once
  } else {
    CHECK_THROWS_WITH_AS(spark::nccl(), doctest::Contains("libnccl.so.2"), spark::InputError);
    CHECK_THROWS_WITH_AS(spark::nccl(), doctest::Contains("\"tcp\""), spark::InputError);
  }
}
#endif

TEST_CASE("require_nccl() refuses a box that cannot pair over NCCL, saying what is missing") {
  if (SPARKD_CUDA && nvidia_gpu_present() && nccl_loadable()) {
    CHECK_NOTHROW(spark::require_nccl());
  } else {
    CHECK_THROWS_WITH_AS(spark::require_nccl(), doctest::Contains("peer.transport = \"nccl\""), spark::InputError);
    CHECK_THROWS_WITH_AS(spark::require_nccl(), doctest::Contains("\"tcp\""), spark::InputError);
  }
}
