// template.cpp — sparkd template (arrives with the chat templates).
#include "engine/commands/commands.h"
#include "engine/util/check.h"

namespace spark {

int run_template(const Args&) { throw InputError("this subcommand is not available yet"); }

}  // namespace spark
