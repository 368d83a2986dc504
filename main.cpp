// main.cpp — the sparkd command line: picks the subcommand and maps errors to exit codes
// (0 success, 2 usage / config / input-file error, 1 runtime failure).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "engine/commands/commands.h"
#include "engine/util/check.h"
#include "web/bench/bench.h"
#include "web/serve.h"

namespace {

struct Command {
  const char* name;
  int (*run)(const spark::Args&);
  const char* usage;  // its lines of the usage text
};

const Command kCommands[] = {
    {"serve", spark::run_serve, R"(  sparkd [serve] --config spark.toml [--set section.key=value ...]
)"},
    {"check", spark::run_check, R"(  sparkd check   --config spark.toml [--set ...] | --model PATH  [--device NAME]
                                     validate, print the model and the memory plan
                                     (--device gb10|h100|GiB,GB/s: plan for that GPU,
                                     with a projected batch-1 decode rate)
)"},
    {"generate", spark::run_generate, R"(  sparkd generate --model PATH --prompt TEXT [--max-tokens N] [--temperature T]
                  [--seed S] [--ids]  offline generation, no server
)"},
    {"tokenize", spark::run_tokenize, R"(  sparkd tokenize   --model PATH     stdin JSONL {"text":...}  -> stdout JSONL {"ids":[...]}
)"},
    {"detokenize", spark::run_detokenize, R"(  sparkd detokenize --model PATH     stdin JSONL {"ids":[...]} -> stdout JSONL {"text":...}
)"},
    {"template", spark::run_template, R"(  sparkd template   --model PATH     stdin JSON {"messages":[...], ...} -> the rendered prompt
)"},
    {"bench", spark::run_bench, R"(  sparkd bench   --url URL [--model NAME] [--concurrency C | --request-rate R]
                 [--num-prompts N] [--input-len I] [--output-len O] [--json FILE]
)"},
    {"version", spark::run_version, R"(  sparkd version                   version, target, CUDA architectures, linking
)"},
};

const char* kFooter = R"(
PATH is a Hugging Face model folder or a .gguf file. Exit codes: 0 success,
2 usage, config or input error, 1 runtime failure.
)";

void print_usage(FILE* to, const Command* only) {
  std::fputs(only ? "usage:\n" : "sparkd — an LLM inference appliance for DGX Spark\n\nusage:\n", to);
  for (const Command& c : kCommands)
    if (!only || only == &c) std::fputs(c.usage, to);
  if (!only) std::fputs("  sparkd SUBCOMMAND --help           that subcommand's usage\n", to);
  std::fputs(kFooter, to);
}

bool asks_for_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    print_usage(stdout, nullptr);
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
    if (asks_for_help(args)) {
      print_usage(stdout, &c);
      return 0;
    }
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
  std::fprintf(stderr, "sparkd: unknown command '%s'\n\n", name.c_str());
  print_usage(stderr, nullptr);
  return 2;
}
