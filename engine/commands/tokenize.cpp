// tokenize.cpp — sparkd tokenize / detokenize (arrive with the tokenizer).
#include "engine/commands/commands.h"
#include "engine/util/check.h"

namespace spark {

int run_tokenize(const Args&) { throw InputError("this subcommand is not available yet"); }

int run_detokenize(const Args&) { throw InputError("this subcommand is not available yet"); }

}  // namespace spark
