// main.cpp — the sparkd command line: picks the subcommand and maps errors to exit codes
// (0 success, 2 usage / config / input-file error, 1 runtime failure).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "engine/commands/commands.h"
#include "engine/util/check.h"

namespace {

const char* kUsage = R"(sparkd — an LLM inference appliance for DGX Spark

usage:
  sparkd [serve] --config spark.toml [--set section.key=value ...]
  sparkd check   --config spark.toml [--set ...] | --model PATH  [--device NAME]
                                     validate, print the model and the memory plan
                                     (--device gb10|h100|GiB,GB/s: plan for that GPU,
                                     with a projected batch-1 decode rate)
  sparkd generate --model PATH --prompt TEXT [--max-tokens N] [--temperature T]
                  [--seed S] [--ids]  offline generation, no server
  sparkd tokenize   --model PATH     stdin JSONL {"text":...}  -> stdout JSONL {"ids":[...]}
  sparkd detokenize --model PATH     stdin JSONL {"ids":[...]} -> stdout JSONL {"text":...}
  sparkd template   --model PATH     stdin JSON {"messages":[...], ...} -> the rendered prompt
  sparkd bench   --url URL [--model NAME] [--concurrency C | --request-rate R]
                 [--num-prompts N] [--input-len I] [--output-len O] [--json FILE]
  sparkd version
  sparkd --help

PATH is a Hugging Face model folder or a .gguf file. Exit codes: 0 success,
2 usage, config or input error, 1 runtime failure.
)";

struct Command {
  const char* name;
  int (*run)(const spark::Args&);
};

const Command kCommands[] = {
    {"serve", spark::run_serve},         {"check", spark::run_check},
    {"generate", spark::run_generate},   {"tokenize", spark::run_tokenize},
    {"detokenize", spark::run_detokenize}, {"template", spark::run_template},
    {"bench", spark::run_bench},         {"version", spark::run_version},
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!args.empty() && args[0] == "--version") args[0] = "version";
  // No subcommand (or a flag first) means serve.
  std::string name = "serve";
  if (!args.empty() && args[0].rfind("-", 0) != 0) {
    name = args[0];
    args.erase(args.begin());
  }
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const spark::InputError& e) {
      std::fprintf(stderr, "sparkd %s: error: %s\n", c.name, e.what());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sparkd %s: failed: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "sparkd: unknown command '%s'\n\n%s", name.c_str(), kUsage);
  return 2;
}
