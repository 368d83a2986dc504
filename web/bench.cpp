// bench.cpp — sparkd bench (arrives with the benchmark).
#include "engine/commands/commands.h"
#include "engine/util/check.h"

namespace spark {

int run_bench(const Args&) { throw InputError("this subcommand is not available yet"); }

}  // namespace spark
