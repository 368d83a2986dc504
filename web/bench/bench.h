// bench.h — `sparkd bench`: load any OpenAI-compatible server and report TTFT, TPOT, ITL
// and throughput. Returns the exit code as the commands of engine/commands/commands.h do.
#pragma once
#include "engine/commands/commands.h"

namespace spark {

int run_bench(const Args& args);

}  // namespace spark
