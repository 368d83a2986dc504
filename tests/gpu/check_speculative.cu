// check_speculative.cu — speculative decoding on the CUDA backend: the engine's greedy
// tokens with n-gram drafts verified in its steps equal its tokens with speculation off, on
// the tiny models, with the device sampler. A verifying step (several rows for one
// sequence, at most rows_at_decode_cost() in all) replays a decode graph with each row as
// a one-row sequence: the rows count the steps that did, and compare the tokens with
// the eager path's (graphs off: the prefill tiles verify) and the CPU backend's. Alone
// under max_num_seqs = 1 (drafts are logits rows beyond it: the step's row budget, not
// max_num_seqs, bounds them) and four at once. The CUDA kernels are not batch invariant
// (a row's bf16 rounding depends on the kernel a step's shape picks), so, as in
// check_model, a prompt may differ from where the CPU's greedy choice is a near-tie: its
// top-2 logit margin below twice the bf16 logits limit (2e-2 of the largest logit). Its
// Q8_0 GGUF copy verifies up to 16 rows a step (every linear layer packed: one row tile
// of packed_gemm.h), the others up to 8.
//
// With a draft model (speculative = "draft") on a second CUDA backend in the same process
// (its own stream, graphs, KV cache and sampler): tiny llama itself and its Q8_0 GGUF as
// drafts of tiny llama, the greedy tokens equal those with speculation off, four at once
// and among 31 others; the model as its own draft has over 90% of its drafts accepted
// (every one on the emulator; on a GPU the draft's catch-up over more than 8 rows runs the
// prefill kernels where the model's verification runs the decode ones, and a near-tie may
// round apart).
//
// With the model's MTP head (speculative = "mtp") on a second CUDA backend: the tiny
// Qwen3.5-MoE with a random head, greedy tokens equal to those with speculation off, four
// at once and among 31 others, the head's forwards run on the model's hidden states.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/stage_loader.h"
#include "engine/core/draft_model.h"
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

// What a run submits: prompt i for max_tokens[i] new tokens, greedy, ignoring EOS.
struct Work {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int> max_tokens;
};

Work four_prompts(int max_tokens) { return {prompts(), std::vector<int>(prompts().size(), max_tokens)}; }

struct Run {
  std::vector<std::vector<int32_t>> prompts;  // the work's
  std::vector<std::vector<int32_t>> tokens;
  MetricsSnapshot metrics;
  CudaStepCounts steps;
  int64_t decode_cost_rows = 0;  // the CUDA backend's rows_at_decode_cost()
  int64_t draft_forwards = 0;  // with a draft model: its forwards, and its CUDA backend's steps
  CudaStepCounts draft_steps;
};

enum class Path { GRAPHS, EAGER, CPU };

// The engine over a CUDA backend with the device sampler (decode graphs on or off) or over
// the CPU backend, greedy; `together`: every prompt submitted before the engine starts
// (they batch, max_num_seqs 8 or one per prompt), else one at a time (max_num_seqs 1).
// `draft`: speculative = "draft" with the model there on a backend of its own, made as the
// model's is (kMtp: speculative = "mtp", the model's MTP head); `work`: empty for the four
// prompts at 24 tokens.
const std::string kMtp = "mtp";

Run run(const std::string& path, bool speculative, bool together, Path on = Path::GRAPHS, const std::string& draft = "",
        Work work = {}) {
  if (work.prompts.empty()) work = four_prompts(24);
  const auto n = int64_t(work.prompts.size());
  Config config = config_for_model(path);
  config.model.max_model_len = 128;
  config.engine.block_size = 16;
  config.engine.max_num_seqs = together ? std::max<int64_t>(8, n) : 1;
  config.engine.max_num_batched_tokens = 512;
  config.engine.speculative = !speculative ? "none" : draft.empty() ? "ngram" : draft == kMtp ? "mtp" : "draft";
  if (draft != kMtp) config.engine.speculative_model = draft;
  config.engine.prompt_lookup_min = 1;
  LoadedModel m = load_model(config);
  const ModelSpec& spec = m.info.spec;
  CudaOptions o;
  o.max_num_seqs = config.engine.max_num_seqs;
  o.max_num_batched_tokens = config.engine.max_num_batched_tokens;
  o.max_model_len = config.model.max_model_len;
  o.block_size = config.engine.block_size;
  o.cuda_graphs = on == Path::GRAPHS;
  // The model's backend, or the draft's: `cuda` is set to it on the CUDA paths (owned by
  // the engine, which outlives its use here).
  auto make_backend = [&](const ModelSpec& s, const Weights& w, CudaBackend*& cuda) -> std::unique_ptr<Backend> {
    if (on == Path::CPU) return std::make_unique<CpuBackend>(s, bind_stage(s, w), 0);
    auto b = std::make_unique<CudaBackend>(s, bind_stage(s, w), o);
    cuda = b.get();
    return b;
  };
  CudaBackend* cuda = nullptr;
  CudaBackend* draft_cuda = nullptr;
  DraftModel* drafter = nullptr;
  std::unique_ptr<Backend> backend = make_backend(spec, m.weights, cuda);
  // 64 blocks hold the four prompts' (2 each); 3 a prompt for more.
  Engine engine(
      config, std::make_unique<LocalExecutor>(std::move(backend), spec.vocab_size), spec,
      [](bool) { return std::make_unique<IdDecoder>(); }, std::max<int64_t>(64, 3 * n));
  std::optional<LoadedModel> dm;  // the draft's weights, which its backend reads
  if (speculative && !draft.empty()) {
    dm = draft == kMtp ? load_mtp_head(m.info) : load_model(draft_model_config(config));
    const ModelSpec& ds = dm->info.spec;
    auto d = std::make_unique<DraftModel>(make_backend(ds, dm->weights, draft_cuda), ds,
                                          config.engine.max_num_batched_tokens);
    drafter = d.get();
    engine.attach_drafter(std::move(d));
  }
  auto request = [&work](const std::vector<int32_t>& prompt, size_t i) {
    Request r;
    r.request_id = "p" + std::to_string(i);
    r.prompt_ids = prompt;
    r.params.temperature = 0.0;
    r.params.max_tokens = work.max_tokens[i];
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
  const auto& ps = work.prompts;
  r.prompts = ps;
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
  if (cuda) r.steps = cuda->step_counts(), r.decode_cost_rows = cuda->rows_at_decode_cost();
  if (drafter) r.draft_forwards = drafter->forwards();
  if (draft_cuda) r.draft_steps = draft_cuda->step_counts();
  return r;
}

// Whether the CPU backend's greedy choice after `tokens` is a near-tie (see the top).
bool cpu_near_tie(const std::string& path, const std::vector<int32_t>& tokens) {
  LoadedModel m = load_model(config_for_model(path));
  CpuBackend cpu(m.info.spec, bind_stage(m.info.spec, m.weights), 0);
  const int32_t blocks = int32_t(tokens.size() / 16 + 1);
  cpu.init_kv_cache(blocks, 16);
  cpu.init_state_slots(1);
  Batch b;
  if (m.info.spec.has_recurrent_layers()) b.state_slots = {0};
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

// A row: each prompt's tokens in `a` equal those in `b`, or first differ where the CPU's
// greedy choice is a near-tie.
void same_row(const std::string& path, const std::string& what, const Run& a, const Run& b) {
  const auto& ps = a.prompts;
  int same = 0, ties = 0;
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    if (a.tokens[i] == b.tokens[i]) {
      ++same;
      continue;
    }
    const auto k =
        std::mismatch(a.tokens[i].begin(), a.tokens[i].end(), b.tokens[i].begin()).first - a.tokens[i].begin();
    std::vector<int32_t> context = ps[i];
    context.insert(context.end(), a.tokens[i].begin(), a.tokens[i].begin() + k);
    ties += cpu_near_tie(path, context);
  }
  const int n = int(a.tokens.size());
  row("speculative", what,
      std::to_string(same) + "/" + std::to_string(n) + (ties ? " + " + std::to_string(ties) + " near-ties" : ""),
      "all but cpu top-2 margin < 2 x limit", same + ties == n);
}

// One step of `rows[s]` tokens for each sequence s after its first `done[s]` tokens of
// `seqs[s]`, a logits row at every row (`every_row`) or at each sequence's last; sequence
// s owns blocks 2s and 2s + 1 (16 tokens each).
Batch step_of(const std::vector<std::vector<int32_t>>& seqs, const std::vector<int32_t>& done,
              const std::vector<int32_t>& rows, bool every_row) {
  Batch b;
  b.max_blocks_per_seq = 2;
  b.query_start.push_back(0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t p = done[s]; p < done[s] + rows[s]; ++p) {
      b.token_ids.push_back(seqs[s][size_t(p)]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(int32_t(s) * 32 + p);
      if (every_row || p + 1 == done[s] + rows[s]) b.logits_rows.push_back(b.num_tokens() - 1);
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(done[s] + rows[s]);
    b.block_tables.insert(b.block_tables.end(), {int32_t(2 * s), int32_t(2 * s + 1)});
  }
  return b;
}

// A graph holds no memory pool: the layers allocate nothing during capture, so the
// memory the runtime associates with graphs (graph allocation nodes) stays 0 however
// many buckets are captured. The emulator does not model graph memory.
void graph_memory_row(const std::string& name) {
#if SPARK_CUDA_EMU
  skip_row("speculative", name + " graph memory pool after capturing a verification step",
           "emulated: graph memory is not modelled");
#else
  uint64_t high = 0;  // the attribute is a cuuint64_t
  CUDA_CHECK(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &high));
  row("speculative", name + " graph memory pool after capturing a verification step",
      std::to_string(high) + " bytes", "0", high == 0);
#endif
}

// The logits of a verification step (1 + 4 rows for one sequence, its rows crossing a
// block boundary, and 1 + 2 for another: 8 rows) after a prefill, from the CUDA backend
// with graphs (the step run three times: eager first use, capture, replay; it rewrites the
// same KV slots with the same values), against the CPU backend's and the eager CUDA
// path's, at check_model's whole-model limits.
void verification_logits(const std::string& name) {
  const std::string path = "tests/golden/models/" + name;
  const LoadedModel m = load_model(config_for_model(path));
  const ModelSpec& spec = m.info.spec;
  const std::vector<std::vector<int32_t>> seqs = {{11, 12, 13, 14, 11, 12, 13, 14, 11, 12, 13, 14, 11, 12, 13, 14, 11},
                                                  {40, 41, 42, 40, 41, 42, 40, 41, 42, 40, 41, 42, 40}};
  const Batch prefill = step_of(seqs, {0, 0}, {12, 10}, false), verify = step_of(seqs, {12, 10}, {5, 3}, true);
  CpuBackend cpu(spec, bind_stage(spec, m.weights), 0);
  cpu.init_kv_cache(4, 16);
  ForwardResult want, got;
  cpu.forward(prefill, nullptr, want);
  cpu.forward(verify, nullptr, want);
  for (bool f16 : {false, true}) {
    const std::string half = f16 ? " fp16" : " bf16";
    const double limit = f16 ? 3e-3 : 2e-2;  // check_model's kLogitsLimitF16 and kLogitsLimitBF16
    std::vector<std::vector<float>> logits;
    CudaStepCounts counts;
    for (bool graphs : {true, false}) {
      CudaOptions o;
      o.f16 = f16;
      o.cuda_graphs = graphs;
      o.max_num_seqs = 2;
      o.max_num_batched_tokens = 64;
      o.max_model_len = 32;
      o.block_size = 16;
      CudaBackend gpu(spec, bind_stage(spec, m.weights), o);
      gpu.init_kv_cache(4, 16);
      gpu.forward(prefill, nullptr, got);
      for (int run = 0; run < (graphs ? 3 : 1); ++run) {
        gpu.forward(verify, nullptr, got);
        logits.push_back(got.logits);
      }
      if (graphs) counts = gpu.step_counts();
      if (graphs && !f16) graph_memory_row(name);
    }
    double worst = 0;
    for (size_t i = 0; i < 3; ++i) worst = std::max(worst, rel_error(want.logits, logits[i]));
    error_row("speculative", name + half + " verification step (8 rows, 2 seqs) logits: graph vs cpu", worst, limit);
    error_row("speculative", name + half + " verification step logits: graph vs eager", rel_error(logits[3], logits[2]),
              limit);
    row("speculative", name + half + " verification step: eager, captured, replayed",
        std::to_string(counts.multi_row_eager) + ", " + std::to_string(counts.multi_row_captured) + ", " +
            std::to_string(counts.multi_row_replayed),
        "1, 1, 1", counts.multi_row_eager == 1 && counts.multi_row_captured == 1 && counts.multi_row_replayed == 1);
  }
}

// `decode_cost_rows`: the rows a step verifies at about a decode step's cost, 16 with
// every linear layer packed (packed_gemm.h's one row tile), else 8.
void check(const std::string& name, int64_t decode_cost_rows = 8) {
  const std::string path = "tests/golden/models/" + name;
  for (bool together : {false, true}) {
    const Run off = run(path, false, together), on = run(path, true, together);
    const std::string how = together ? " (4 batched)" : " (one at a time, max_num_seqs 1)";
    same_row(path, name + " greedy 24 tok: speculation on == off" + how, off, on);
    row("speculative", name + " rows at decode cost, most rows a verifying step took" + how,
        std::to_string(on.decode_cost_rows) + ", " + std::to_string(on.steps.multi_row_most_rows),
        std::to_string(decode_cost_rows) + ", <= that",
        on.decode_cost_rows == decode_cost_rows && on.steps.multi_row_most_rows <= decode_cost_rows);
    // Steps of several rows a sequence (drafts, or a prompt of at most 8 tokens) replay or
    // capture a graph but for each bucket's first use; more of them than the prompts alone
    // make (speculation off), so draft steps did.
    const CudaStepCounts& c = on.steps;
    const int64_t buckets = decode_cost_rows > 8 ? 5 : 4;  // 1, 2, 4, 8 (, 16)
    const int64_t prompt_steps = off.steps.multi_row_replayed + off.steps.multi_row_captured + off.steps.multi_row_eager;
    row("speculative", name + " multi-row steps: graph replays, captures / eager" + how,
        std::to_string(c.multi_row_replayed) + ", " + std::to_string(c.multi_row_captured) + " / " +
            std::to_string(c.multi_row_eager),
        "sum > " + std::to_string(prompt_steps) + " (spec off) / <= " + std::to_string(buckets) +
            " (buckets' first uses)",
        c.multi_row_replayed > 0 && c.multi_row_replayed + c.multi_row_captured > prompt_steps &&
            c.multi_row_eager <= buckets);
    const Run eager = run(path, true, together, Path::EAGER), cpu = run(path, true, together, Path::CPU);
    row("speculative", name + " graphs off: multi-row steps eager" + how, std::to_string(eager.steps.multi_row_eager),
        "> 0, none replayed",
        eager.steps.multi_row_eager > 0 && eager.steps.multi_row_replayed + eager.steps.multi_row_captured == 0);
    same_row(path, name + " speculation on: graphs == eager" + how, eager, on);
    same_row(path, name + " speculation on: cuda graphs == cpu" + how, cpu, on);
    row("speculative", name + " drafts verified, accepted" + how,
        std::to_string(on.metrics.spec_num_draft_tokens) + ", " + std::to_string(on.metrics.spec_num_accepted_tokens),
        "> 0, > 0", on.metrics.spec_num_draft_tokens > 0 && on.metrics.spec_num_accepted_tokens > 0);
    row("speculative", name + " KV blocks free after" + how, std::to_string(on.metrics.kv_blocks_used), "0",
        on.metrics.kv_blocks_used == 0);
  }
}

// 32 requests at once: the four prompts for `tokens` tokens among 28 others (the prompts
// with another last token) for 1 to 4: no sequence drafts while the step's rows exceed the
// budget (rows_at_decode_cost(), 8 rows), so the four get drafts once the others are done,
// the draft catching up on all they wrote meanwhile.
Work crowd(int tokens, int64_t vocab) {
  Work w = four_prompts(tokens);
  for (int i = 4; i < 32; ++i) {
    std::vector<int32_t> p = w.prompts[size_t(i) % 4];
    p.back() = int32_t((p.back() + i) % vocab);
    w.prompts.push_back(std::move(p));
    w.max_tokens.push_back(1 + i % 4);
  }
  return w;
}

// Speculative decoding with a draft model, the draft on a CUDA backend of its own beside
// the model's (graphs on in both): the model itself and its Q8_0 GGUF as drafts, the four
// prompts batched and among 31 others, against speculation off (see the top for the
// acceptance). Short outputs: the emulator runs it in CI.
void check_draft(const std::string& name) {
  const std::string path = "tests/golden/models/" + name;
  const int tokens = 12;
  const Work four = four_prompts(tokens), many = crowd(tokens, inspect_model(config_for_model(path)).spec.vocab_size);
  const Run off = run(path, false, true, Path::GRAPHS, "", four),
            off_many = run(path, false, true, Path::GRAPHS, "", many);
  for (const std::string& draft : {path, std::string("tests/golden/models/llama_q8_0.gguf")}) {
    const bool self = draft == path;
    const std::string what = name + " draft " + (self ? "itself" : std::filesystem::path(draft).filename().string());
    for (bool among : {false, true}) {
      const std::string how = among ? " (among 31 others)" : " (4 batched)";
      const Run on = run(path, true, true, Path::GRAPHS, draft, among ? many : four);
      same_row(path, what + ": greedy " + std::to_string(tokens) + " tok: speculation on == off" + how,
               among ? off_many : off, on);
      const MetricsSnapshot& m = on.metrics;
      const uint64_t drafted = m.spec_num_draft_tokens, accepted = m.spec_num_accepted_tokens;
      row("speculative", what + ": drafts verified, accepted" + how,
          std::to_string(drafted) + ", " + std::to_string(accepted) + " (" +
              fmt("%.1f%%", drafted ? 100.0 * double(accepted) / double(drafted) : 0.0) + ")",
          self ? "> 0, > 90%" : "> 0, -", drafted > 0 && (!self || 10 * accepted > 9 * drafted));
      // The draft's own graphs, captured and replayed on its stream between the model's.
      const CudaStepCounts& d = on.draft_steps;
      const int64_t captured = d.decode_captured + d.multi_row_captured,
                    replayed = d.decode_replayed + d.multi_row_replayed;
      row("speculative", what + ": draft forwards; its graphs captured, replayed" + how,
          std::to_string(on.draft_forwards) + "; " + std::to_string(captured) + ", " + std::to_string(replayed),
          "> 0; sum > 0", on.draft_forwards > 0 && captured + replayed > 0);
      row("speculative", what + ": KV blocks free after" + how, std::to_string(m.kv_blocks_used), "0",
          m.kv_blocks_used == 0);
    }
  }
}

// The model's MTP head on a CUDA backend of its own (graphs on in both), the four prompts
// batched and among 31 others, against speculation off. A random head: most drafts fail.
void check_mtp(const std::string& name) {
  const std::string path = "tests/golden/models/" + name;
  const int tokens = 12;
  const Work four = four_prompts(tokens), many = crowd(tokens, inspect_model(config_for_model(path)).spec.vocab_size);
  for (bool among : {false, true}) {
    const std::string how = among ? " (among 31 others)" : " (4 batched)";
    const Work& work = among ? many : four;
    const Run off = run(path, false, true, Path::GRAPHS, "", work), on = run(path, true, true, Path::GRAPHS, kMtp, work);
    same_row(path, name + " MTP head: greedy " + std::to_string(tokens) + " tok: speculation on == off" + how, off, on);
    const MetricsSnapshot& m = on.metrics;
    row("speculative", name + " MTP head: drafts verified; head forwards" + how,
        std::to_string(m.spec_num_draft_tokens) + "; " + std::to_string(on.draft_forwards), "> 0; > 0",
        m.spec_num_draft_tokens > 0 && on.draft_forwards > 0);
    row("speculative", name + " MTP head: KV blocks free after" + how, std::to_string(m.kv_blocks_used), "0",
        m.kv_blocks_used == 0);
  }
}

}  // namespace

int main() {
  return run_main("speculative", [] {
    for (const char* name : {"llama", "qwen3"}) {
      const std::string n = name;
      run_part("speculative", n + " verification step", [n] { verification_logits(n); });
      run_part("speculative", n + " ngram", [n] { check(n); });
    }
    // A hybrid: a verifying step keeps each sequence's recurrent state in its snapshot slot
    // and rejected drafts restore it (state copies on the device), while the rows still run
    // as one-row sequences through the decode graphs.
    run_part("speculative", "qwen3_5 ngram", [] { check("qwen3_5"); });
    // Packed weights: verifying steps of up to 16 rows at a decode step's cost.
    run_part("speculative", "llama Q8_0 GGUF ngram", [] { check("llama_q8_0.gguf", 16); });
    // Two CUDA backends in one process: the model's and its draft model's.
    run_part("speculative", "llama draft model", [] { check_draft("llama"); });
    run_part("speculative", "qwen3_5_moe_mtp MTP head", [] { check_mtp("qwen3_5_moe_mtp"); });
  });
}
