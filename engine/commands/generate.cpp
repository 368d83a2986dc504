// generate.cpp — `sparkd generate`: offline generation for one prompt through the full
// engine (scheduler, paged KV cache, sampler, stops), no server.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/backend/stage_loader.h"
#include "engine/commands/commands.h"
#include "engine/config.h"
#include "engine/core/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/check.h"
#include "engine/util/flags.h"

namespace spark {

namespace {

constexpr const char* kGenerateUsage =
    "usage: sparkd generate --model PATH --prompt TEXT [--max-tokens N] [--temperature T] [--seed S] [--ids]";

struct GenerateOptions {
  std::string model;
  std::string prompt;
  int64_t max_tokens = 64;
  double temperature = 0.0;  // greedy unless asked: the same prompt gives the same text
  std::optional<uint64_t> seed;
  bool ids = false;
};

GenerateOptions parse(const Args& args) {
  Flags flags(args, {"ids"});
  flags.expect_only({"model", "prompt", "max-tokens", "temperature", "seed", "ids"});
  if (!flags.positional().empty()) throw InputError("unexpected argument '" + flags.positional()[0] + "'\n" + kGenerateUsage);
  if (!flags.has("model") || !flags.has("prompt")) throw InputError(kGenerateUsage);
  GenerateOptions o;
  o.model = flags.require("model");
  o.prompt = flags.require("prompt");
  o.max_tokens = flags.get_int("max-tokens", o.max_tokens);
  o.temperature = flags.get_double("temperature", o.temperature);
  if (flags.has("seed")) {
    long long seed = flags.get_int("seed", 0);
    if (seed < 0) throw InputError("--seed must be a non-negative integer, got " + std::to_string(seed));
    o.seed = static_cast<uint64_t>(seed);
  }
  o.ids = flags.has("ids");
  return o;
}

}  // namespace

int run_generate(const Args& args) {
  const GenerateOptions opt = parse(args);
  Config config = config_for_model(opt.model);
  StagePlan plan = plan_stage(config);
  require_fits(plan.memory);

  auto tokenizer = Tokenizer::load(plan.info.tokenizer_path);
  Request request;
  request.request_id = "generate";
  request.prompt_ids = tokenizer->encode(opt.prompt, /*add_special_tokens=*/true, /*parse_special=*/true);
  request.params.temperature = opt.temperature;
  request.params.max_tokens = opt.max_tokens;
  request.params.seed = opt.seed;

  // One sequence: size the context and the KV cache to this prompt and its output, so a
  // model with a long context does not allocate a cache it will never use. A request
  // that does not fit the model's context is refused by the engine's admission.
  const int64_t needed = static_cast<int64_t>(request.prompt_ids.size()) + opt.max_tokens;
  config.model.max_model_len = std::max<int64_t>(1, std::min(needed, plan.memory.max_model_len));
  config.engine.max_num_seqs = 1;
  const int64_t num_blocks = (config.model.max_model_len + config.engine.block_size - 1) / config.engine.block_size;

  const ModelSpec spec = plan.info.spec;
  auto stage = load_stage(config, std::move(plan));
  Engine engine(config, std::move(stage->backend), spec, *tokenizer, num_blocks);
  auto stream = engine.submit(request);
  engine.start();

  RequestOutput all;
  std::vector<int32_t> output_ids;
  for (;;) {
    auto out = stream->pop(std::chrono::milliseconds(200));
    if (!out) continue;
    output_ids.insert(output_ids.end(), out->token_ids.begin(), out->token_ids.end());
    if (!opt.ids && !out->text.empty()) {
      std::fwrite(out->text.data(), 1, out->text.size(), stdout);
      std::fflush(stdout);
    }
    all.text += out->text;
    if (out->finished) {
      all.finish_reason = out->finish_reason;
      all.error = out->error;
      break;
    }
  }
  engine.stop();
  if (all.finish_reason == FinishReason::ERROR) throw RuntimeError(all.error);

  if (opt.ids) {
    nlohmann::json j;
    j["prompt_ids"] = request.prompt_ids;
    j["output_ids"] = output_ids;
    j["text"] = all.text;
    std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
  } else {
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace spark
