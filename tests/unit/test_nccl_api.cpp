// test_nccl_api.cpp — NCCL loaded at run time: every function, or an InputError that names
// the library and the package to install (the GPU-free part of peer.transport = "nccl").
#include <doctest/doctest.h>

#include <string>

#include "engine/peer/link.h"
#include "engine/peer/nccl_api.h"
#include "engine/util/check.h"

#if SPARKD_CUDA
TEST_CASE("nccl(): all eight functions from libnccl.so.2, or a message naming it") {
  try {
    const spark::NcclApi& api = spark::nccl();
    const bool all = api.GetUniqueId && api.CommInitRankConfig && api.CommGetAsyncError && api.CommDestroy &&
                     api.CommAbort && api.Send && api.Recv && api.GetErrorString;
    REQUIRE(all);
    CHECK(std::string(api.GetErrorString(ncclInvalidArgument)).size() > 0);
    CHECK(&spark::nccl() == &api);  // loaded once
  } catch (const spark::InputError& e) {
    const std::string why = e.what();
    CHECK(why.find("libnccl.so.2") != std::string::npos);
    CHECK(why.find("\"tcp\"") != std::string::npos);
  }
}
#endif

TEST_CASE("require_nccl() refuses a box that cannot pair over NCCL, saying what is missing") {
  try {
    spark::require_nccl();  // a box with a GPU and NCCL passes
  } catch (const spark::InputError& e) {
    const std::string why = e.what();
    CHECK(why.find("peer.transport = \"nccl\"") != std::string::npos);
    CHECK(why.find("\"tcp\"") != std::string::npos);
  }
}
