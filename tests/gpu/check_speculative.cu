// check_speculative.cu — speculative decoding on the CUDA backend: the engine's greedy
// tokens with n-gram drafts verified in its steps equal its tokens with speculation off, on
// the tiny models, with the device sampler. A verifying step has several rows for one
// sequence, so it runs outside the decode graphs (which hold one row per sequence); the
// steps without drafts still replay them. Alone (one sequence: drafts fill the step up to
// the backend's row budget) and four at once. The CUDA kernels are not batch invariant (a
// row's bf16 rounding depends on the kernel a step's shape picks), so, as in check_model,
// a prompt may differ from where the CPU's greedy choice is a near-tie: its top-2 logit
// margin below twice the bf16 logits limit (2e-2 of the largest logit).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
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

// Whether the CPU backend's greedy choice after `tokens` is a near-tie (see the top).
bool cpu_near_tie(const std::string& path, const std::vector<int32_t>& tokens) {
  LoadedModel m = load_model(config_for_model(path));
  CpuBackend cpu(m.info.spec, bind_stage(m.info.spec, m.weights), 0);
  const int32_t blocks = int32_t(tokens.size() / 16 + 1);
  cpu.init_kv_cache(blocks, 16);
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.token_ids.push_back(tokens[i]);
    b.positions.push_back(int32_t(i));
    b.slot_mapping.push_back(int32_t(i));
  }
  b.query_start = {0, int32_t(tokens.size())};
  b.context_lens = {int32_t(tokens.size())};
  b.max_blocks_per_seq = blocks;
  for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
  b.logits_rows = {int32_t(tokens.size()) - 1};
  ForwardResult out;
  cpu.forward(b, nullptr, out);
  std::vector<float> top = out.logits;
  double scale = 0;
  for (float v : top) scale = std::max(scale, std::fabs(double(v)));
  std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
  return double(top[0]) - double(top[1]) < 2 * 2e-2 * scale;
}

void check(const std::string& name) {
  const std::string path = "tests/golden/models/" + name;
  const auto ps = prompts();
  for (bool together : {false, true}) {
    const Run off = run(path, false, together), on = run(path, true, together);
    int same = 0, ties = 0;
    for (size_t i = 0; i < off.tokens.size(); ++i) {
      if (off.tokens[i] == on.tokens[i]) {
        ++same;
        continue;
      }
      const auto k = std::mismatch(off.tokens[i].begin(), off.tokens[i].end(), on.tokens[i].begin()).first -
                     off.tokens[i].begin();
      std::vector<int32_t> context = ps[i];
      context.insert(context.end(), off.tokens[i].begin(), off.tokens[i].begin() + k);
      ties += cpu_near_tie(path, context);
    }
    const int n = int(off.tokens.size());
    const std::string how = together ? " (4 batched)" : " (one at a time)";
    row("speculative", name + " greedy 24 tok: speculation on == off" + how,
        std::to_string(same) + "/" + std::to_string(n) + (ties ? " + " + std::to_string(ties) + " near-ties" : ""),
        "all but cpu top-2 margin < 2 x limit", same + ties == n);
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
