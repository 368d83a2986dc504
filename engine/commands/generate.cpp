// generate.cpp — sparkd generate (arrives with the engine core).
#include "engine/commands/commands.h"
#include "engine/util/check.h"

namespace spark {

int run_generate(const Args&) { throw InputError("this subcommand is not available yet"); }

}  // namespace spark
