// check_speculative.cu — speculative decoding on the CUDA backend: the engine's greedy
// tokens with n-gram drafts verified in its steps equal its tokens with speculation off, on
// the tiny models, with the device sampler. A verifying step has several rows for one
// sequence, so it runs outside the decode graphs (which hold one row per sequence); the
// steps without drafts still replay them. Alone (one sequence: drafts fill the step up to
// the backend's row budget) and four at once.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/core/engine.h"
#include "engine/core/local_executor.h"
#include "engine/model/model_loader.h"
#include "tests/gpu/gpu_check.h"

using namespace spark;
using namespace spark::gpu_check;

namespace {

class IdDecoder : public TokenDecoder {
 public:
  std::string push(int32_t id) override { return std::to_string(id) + " "; }
  std::string flush() override { return ""; }
};

// Prompts that repeat a phrase (drafts found at once) and one that does not.
std::vector<std::vector<int32_t>> prompts() {
  return {{11, 12, 13, 14, 11, 12, 13, 14, 11, 12, 13},
          {40, 41, 42, 40, 41, 42, 40, 41},
          {7, 8, 9, 10, 7, 8, 9, 10, 7, 8, 9, 10, 7},
          {100, 3, 57, 21, 88, 64, 5}};
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  MetricsSnapshot metrics;
};

// The engine over a CUDA backend with the device sampler, greedy; `together`: every prompt
// submitted before the engine starts (they batch), else one at a time.
Run run(const std::string& path, bool speculative, bool together) {
  Config config = config_for_model(path);
  config.model.max_model_len = 128;
  config.engine.block_size = 16;
  config.engine.max_num_seqs = 8;
  config.engine.max_num_batched_tokens = 512;
  config.engine.speculative = speculative ? "ngram" : "none";
  config.engine.prompt_lookup_min = 1;
  LoadedModel m = load_model(config);
  const ModelSpec& spec = m.info.spec;
  CudaOptions o;
  o.max_num_seqs = config.engine.max_num_seqs;
  o.max_num_batched_tokens = config.engine.max_num_batched_tokens;
  o.max_model_len = config.model.max_model_len;
  o.block_size = config.engine.block_size;
  auto backend = std::make_unique<CudaBackend>(spec, bind_stage(spec, m.weights), o);
  Engine engine(config, std::make_unique<LocalExecutor>(std::move(backend), spec.vocab_size), spec,
                [](bool) { return std::make_unique<IdDecoder>(); }, 64);
  auto request = [](const std::vector<int32_t>& prompt, size_t i) {
    Request r;
    r.request_id = "p" + std::to_string(i);
    r.prompt_ids = prompt;
    r.params.temperature = 0.0;
    r.params.max_tokens = 24;
    r.params.ignore_eos = true;
    return r;
  };
  auto collect = [](RequestStream& s) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 6000; ++i) {  // 10 minutes: a hang fails the row instead of the run
      auto out = s.pop(std::chrono::milliseconds(100));
      if (!out) continue;
      ids.insert(ids.end(), out->token_ids.begin(), out->token_ids.end());
      if (out->finished) return ids;
    }
    throw std::runtime_error("a request did not finish");
  };
  Run r;
  const auto ps = prompts();
  if (together) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < ps.size(); ++i) streams.push_back(engine.submit(request(ps[i], i)));
    engine.start();
    for (auto& s : streams) r.tokens.push_back(collect(*s));
  } else {
    engine.start();
    for (size_t i = 0; i < ps.size(); ++i) r.tokens.push_back(collect(*engine.submit(request(ps[i], i))));
  }
  engine.stop();
  r.metrics = engine.metrics();
  return r;
}

void check(const std::string& name) {
  const std::string path = "tests/golden/models/" + name;
  for (bool together : {false, true}) {
    const Run off = run(path, false, together), on = run(path, true, together);
    int same = 0;
    for (size_t i = 0; i < off.tokens.size(); ++i) same += off.tokens[i] == on.tokens[i];
    const int n = int(off.tokens.size());
    const std::string how = together ? " (4 batched)" : " (one at a time)";
    row("speculative", name + " greedy 24 tok: speculation on == off" + how,
        std::to_string(same) + "/" + std::to_string(n), "all", same == n);
    row("speculative", name + " drafts verified, accepted" + how,
        std::to_string(on.metrics.spec_num_draft_tokens) + ", " + std::to_string(on.metrics.spec_num_accepted_tokens),
        "> 0, > 0", on.metrics.spec_num_draft_tokens > 0 && on.metrics.spec_num_accepted_tokens > 0);
    row("speculative", name + " KV blocks free after" + how, std::to_string(on.metrics.kv_blocks_used), "0",
        on.metrics.kv_blocks_used == 0);
  }
}

}  // namespace

int main() {
  return run_main("speculative", [] {
    for (const char* name : {"llama", "qwen3"}) check(name);
  });
}
