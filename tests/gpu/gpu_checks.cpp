// gpu_checks — every GPU check program (tests/gpu/check_*.cu) in one executable, so a GPU
// bundle carries one copy of the engine instead of one per check. Each check's main() is
// renamed gpu_check_<name> when its object is made (gpu.mk, emu.mk); the build writes
// check_list.h, one CHECK(name) line per program. Run as `gpu_checks check_model`, or through
// a link named after the check (check_model -> gpu_checks), which is how run_checks.sh and
// device_run.py find the programs; `gpu_checks list` prints the names.
// On a GPU build (WITH_SPARKD) the executable is sparkd as well: main.cpp's main() renamed
// sparkd_main, run under any other name (the bundle's bin/sparkd links here), so the engine's
// device code, most of either binary, travels once.
#include <cstdio>
#include <cstring>

#define CHECK(name) extern "C" int gpu_##name();
#include "check_list.h"
#undef CHECK
#if WITH_SPARKD
extern "C" int sparkd_main(int argc, char** argv);
#endif

namespace {

struct Check {
  const char* name;
  int (*run)();
};

constexpr Check kChecks[] = {
#define CHECK(name) {#name, gpu_##name},
#include "check_list.h"
#undef CHECK
};

const char* base_name(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

int main(int argc, char** argv) {
  const char* self = base_name(argc > 0 ? argv[0] : "gpu_checks");
  const bool direct = std::strcmp(self, "gpu_checks") == 0;
#if WITH_SPARKD
  if (!direct && std::strncmp(self, "check_", 6) != 0) return sparkd_main(argc, argv);
#endif
  const char* name = direct ? (argc > 1 ? argv[1] : "") : self;
  if (direct && std::strcmp(name, "list") == 0) {
    for (const Check& c : kChecks) std::printf("%s\n", c.name);
    return 0;
  }
  for (const Check& c : kChecks)
    if (std::strcmp(c.name, name) == 0) return c.run();
  std::fprintf(stderr, "gpu_checks: no check named '%s'; usage: gpu_checks NAME | list, or a link named after a check:\n", name);
  for (const Check& c : kChecks) std::fprintf(stderr, "  %s\n", c.name);
  return 2;
}
