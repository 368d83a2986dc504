// test_hooks.cpp — the test build's fault injection (see test_hooks.h); empty otherwise.
#include "engine/util/test_hooks.h"

#if SPARKD_TEST_HOOKS
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace spark::test_hooks {

namespace {

void wait_while_file_exists(const char* variable) {
  const char* path = std::getenv(variable);
  if (!path) return;
  while (access(path, F_OK) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

void engine_turn() { wait_while_file_exists("SPARKD_TEST_WEDGE_FILE"); }

void model_load() { wait_while_file_exists("SPARKD_TEST_LOAD_HOLD_FILE"); }

std::chrono::steady_clock::duration engine_stall_limit(std::chrono::steady_clock::duration normal) {
  const char* s = std::getenv("SPARKD_TEST_STALL_LIMIT_S");
  if (!s) return normal;
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(std::stod(s)));
}

int32_t forced_token(int64_t index, int32_t sampled) {
  static const std::vector<int32_t> forced = [] {
    std::vector<int32_t> ids;
    const char* s = std::getenv("SPARKD_TEST_FORCED_TOKENS");
    for (const char* p = s; p && *p;) {
      char* end = nullptr;
      ids.push_back(int32_t(std::strtol(p, &end, 10)));
      p = *end == ',' ? end + 1 : end;
      if (end == p && *p) break;
    }
    return ids;
  }();
  return index >= 0 && size_t(index) < forced.size() ? forced[size_t(index)] : sampled;
}

}  // namespace spark::test_hooks
#endif
