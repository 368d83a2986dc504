// check.cpp — the abort path of SPARK_CHECK.
#include "engine/util/check.h"

#include <cstdio>
#include <cstdlib>

namespace spark {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "sparkd: internal error at %s:%d: check `%s` failed%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace spark
