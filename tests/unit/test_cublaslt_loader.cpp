// test_cublaslt_loader.cpp — cuBLASLt is loaded at run time: a missing or wrong library is a
// message naming the version needed, and the real one provides every function sparkd calls.
#include <doctest/doctest.h>

#if SPARKD_CUDA && !defined(SPARK_CUDA_EMU)
#include "engine/backend/cuda/cublaslt_loader.h"

using spark::probe_cublaslt;

TEST_CASE("cublaslt loader: a missing library names the version range and the way out") {
  spark::CublasLtStatus s = probe_cublaslt("libcublasLt.so.999");
  REQUIRE(!s.error.empty());
  CHECK(s.error.find("libcublasLt.so.999 could not be loaded") != std::string::npos);
  CHECK(s.error.find("cuBLASLt 13.x") != std::string::npos);
  CHECK(s.error.find("backend = \"cpu\"") != std::string::npos);
}

TEST_CASE("cublaslt loader: the toolkit's library has every function sparkd calls") {
  spark::CublasLtStatus s = probe_cublaslt();
  if (!s.error.empty() && s.error.find("could not be loaded") != std::string::npos) {
    MESSAGE("no cuBLASLt on this machine: " << s.error);
    return;
  }
  CHECK(s.error == "");
  CHECK(s.version / 10000 == spark::kCublasLtMajor);
  CHECK(!s.path.empty());
}
#endif
