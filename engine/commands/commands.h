// commands.h — one function per CLI subcommand that needs no HTTP (run_serve and run_bench
// are declared beside their code, in web/serve.h and web/bench/bench.h); main.cpp
// dispatches to them. Each takes the arguments after the subcommand's name and returns the
// exit code (0 success, 2 usage / config / input-file error, 1 runtime failure).
#pragma once
#include <string>
#include <vector>

namespace spark {

using Args = std::vector<std::string>;

int run_check(const Args& args);       // engine/commands/check.cpp
int run_generate(const Args& args);    // engine/commands/generate.cpp
int run_tokenize(const Args& args);    // engine/commands/tokenize.cpp
int run_detokenize(const Args& args);  // engine/commands/tokenize.cpp
int run_template(const Args& args);    // engine/commands/template.cpp
int run_version(const Args& args);     // engine/commands/version.cpp

}  // namespace spark
