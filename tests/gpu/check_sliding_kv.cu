// check_sliding_kv.cu — the CUDA backend's windowed KV cache on the tiny gpt-oss (windows
// of 8 tokens on layers 0 and 2): its sliding-window layers hold only the first M of the
// N blocks (Backend::init_windowed_kv_cache), and the engine's Scheduler and BlockManager
// move each sequence's blocks that fall behind its window to full-only blocks, the next
// step copying their full-attention K/V (Batch::block_copies, kv_block_copy.h). Checked on
// the steps the engine plans for staggered prompts far longer than the window, then for a
// second wave hitting the prefix cache (its early blocks full-only copies):
// - logits against the CPU backend with the same windowed cache, in BF16 and FP16, and
//   the argmax tokens; steps that copy include chunked prefills and replayed decode graphs;
// - an FP8 windowed cache against an FP8 cache of every layer for every block, on the
//   same tokens: the same kernels read the same values, so the logits are equal;
// - a batch whose window reaches a block the sliding layers do not hold is refused, and
//   under the emulator an attention kernel reading such a block is a device error.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/attention.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/core/block_manager.h"
#include "engine/core/scheduler.h"
#include "engine/model/memory_plan.h"
#include "engine/model/model_loader.h"
#include "engine/model/stage_weights.h"
#include "engine/util/splitmix.h"
#include "tests/gpu/gpu_check.h"
#include "tests/gpu/model_parity.h"

using namespace spark;
using namespace spark::gpu_check;

namespace {

constexpr int64_t kBlock = 8;  // the smallest block the CUDA attention takes: a window spans 2
constexpr int64_t kMaxSeqs = 4;
constexpr int64_t kStepTokens = 24;  // prefills go in chunks beside the decodes
constexpr int64_t kMaxModelLen = 128;

struct Cache {
  int64_t blocks = 0, window_blocks = 0;
};

// As the memory plan sizes the window blocks for these limits (15), and room for every
// sequence's whole context in full-only blocks besides.
Cache windowed(const ModelSpec& spec) {
  const int64_t window = window_blocks_needed(spec.sliding_window, kBlock, kMaxSeqs, kStepTokens);
  return {window + kMaxSeqs * kMaxModelLen / kBlock, window};
}

CudaOptions options(bool f16, bool fp8) {
  CudaOptions o;
  o.f16 = f16;
  o.fp8_kv = fp8;
  o.max_num_seqs = kMaxSeqs;
  o.max_num_batched_tokens = kStepTokens;
  o.max_model_len = kMaxModelLen;
  o.block_size = kBlock;
  return o;
}

std::vector<int32_t> random_ids(size_t n, uint64_t seed) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(int32_t(3 + splitmix64(seed * 1000 + i) % 253));  // no 0, 1 or EOS 2
  return ids;
}

std::vector<float> logits_row(const std::vector<float>& logits, size_t r, size_t vocab) {
  return {logits.begin() + long(r * vocab), logits.begin() + long((r + 1) * vocab)};
}

int32_t argmax(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

// What one run of the waves saw: every backend's logits, step after step, and what the
// steps asked of the windowed cache.
struct Trace {
  std::vector<std::vector<std::vector<float>>> logits;  // [backend][step]
  std::vector<int32_t> tokens;                          // the first backend's argmax, in row order
  int steps = 0, copy_steps = 0, copies = 0, replayed_copy_steps = 0, prefill_copy_steps = 0;
  int full_only_reads = 0;  // sequence-steps whose context reaches a block id >= M
  int64_t hit_tokens = 0;
};

// Four prompts of 35 to 57 tokens, 16 tokens each; then two prompts that extend the first
// two sequences (prompt and output) by 5 tokens, 4 tokens each: prefix-cache hits. One
// Scheduler plans every step as the engine would; every backend runs it; the first
// backend's argmax is what the sequences append. `watch`: the CUDA backend whose graph
// replays are counted.
Trace run_waves(Cache cache, const std::vector<Backend*>& backends, const CudaBackend* watch, int64_t window) {
  BlockManager blocks(cache.blocks, kBlock, true, {window, cache.window_blocks});
  SchedulerConfig sc;
  sc.max_num_seqs = kMaxSeqs;
  sc.max_num_batched_tokens = kStepTokens;
  sc.max_model_len = kMaxModelLen;
  Scheduler scheduler(sc, blocks);
  for (Backend* b : backends) b->init_windowed_kv_cache(cache.blocks, cache.window_blocks, kBlock);
  Trace t;
  t.logits.resize(backends.size());
  std::vector<std::unique_ptr<Sequence>> seqs;
  auto add = [&](std::vector<int32_t> prompt, int64_t max_tokens) {
    seqs.push_back(std::make_unique<Sequence>(int64_t(seqs.size()), std::move(prompt)));
    seqs.back()->max_tokens = max_tokens;
    scheduler.add(seqs.back().get());
  };
  auto drain = [&] {
    while (scheduler.has_work()) {
      ScheduledStep step = scheduler.schedule();
      SPARK_CHECK(!step.empty() && step.preempted.empty(), "the cache holds every sequence");
      const Batch& b = step.batch;
      const CudaStepCounts before = watch->step_counts();
      for (size_t i = 0; i < backends.size(); ++i) {
        ForwardResult out;
        backends[i]->forward(b, nullptr, out);
        t.logits[i].push_back(std::move(out.logits));
      }
      const size_t vocab = t.logits[0].back().size() / std::max<size_t>(b.logits_rows.size(), 1);
      std::vector<int32_t> next;
      for (size_t r = 0; r < b.logits_rows.size(); ++r)
        next.push_back(argmax(logits_row(t.logits[0].back(), r, vocab)));
      t.tokens.insert(t.tokens.end(), next.begin(), next.end());
      ++t.steps;
      if (!b.block_copies.empty()) {
        ++t.copy_steps;
        t.copies += int(b.block_copies.size() / 2);
        t.replayed_copy_steps += watch->step_counts().decode_replayed > before.decode_replayed;
        t.prefill_copy_steps += b.num_tokens() > b.num_seqs();
      }
      for (int32_t s = 0; s < b.num_seqs(); ++s) {
        const int64_t used = (b.context_lens[size_t(s)] + kBlock - 1) / kBlock;
        const auto* row = b.block_tables.data() + size_t(s) * size_t(b.max_blocks_per_seq);
        t.full_only_reads += std::any_of(row, row + used, [&](int32_t id) { return id >= cache.window_blocks; });
      }
      scheduler.update(step, next);
      for (const StepEntry& e : step.entries)
        if (e.seq->num_output_tokens() >= e.seq->max_tokens) scheduler.finish(e.seq, FinishReason::LENGTH);
    }
  };
  const size_t lengths[] = {41, 50, 57, 35};
  for (size_t i = 0; i < 4; ++i) add(random_ids(lengths[i], i + 1), 16);
  drain();
  const int64_t hits_before = blocks.prefix_cache_hits();
  for (size_t i = 0; i < 2; ++i) {
    std::vector<int32_t> prompt = seqs[i]->token_ids;
    const auto more = random_ids(5, 10 + i);
    prompt.insert(prompt.end(), more.begin(), more.end());
    add(prompt, 4);
  }
  drain();
  t.hit_tokens = blocks.prefix_cache_hits() - hits_before;
  return t;
}

// Largest relative error of `got`'s logits rows against `want`'s, and the rows whose
// argmax differs where the reference's top-2 margin is not a near-tie (below twice the
// error the limit allows).
struct Agreement {
  double err = 0;
  int rows = 0, same = 0, ties = 0;
};
Agreement compare(const std::vector<std::vector<float>>& want, const std::vector<std::vector<float>>& got, size_t vocab,
                  double limit) {
  Agreement a;
  for (size_t s = 0; s < want.size(); ++s)
    for (size_t r = 0; r * vocab < want[s].size(); ++r) {
      const auto w = logits_row(want[s], r, vocab), g = logits_row(got[s], r, vocab);
      a.err = std::max(a.err, rel_error(w, g));
      ++a.rows;
      if (argmax(w) == argmax(g)) {
        ++a.same;
        continue;
      }
      std::vector<float> top = w;
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      double scale = 0;
      for (float v : w) scale = std::max(scale, double(std::fabs(v)));
      a.ties += double(top[0]) - double(top[1]) < 2 * limit * scale;
    }
  return a;
}

void parity_with_cpu(const LoadedModel& m) {
  const ModelSpec& spec = m.info.spec;
  const Cache cache = windowed(spec);
  CpuBackend cpu(spec, bind_stage(spec, m.weights), 0);
  CudaBackend bf16(spec, bind_stage(spec, m.weights), options(false, false));
  CudaBackend f16(spec, bind_stage(spec, m.weights), options(true, false));
  const Trace t = run_waves(cache, {&cpu, &bf16, &f16}, &bf16, spec.sliding_window);
  const std::string shape = std::to_string(cache.window_blocks) + " of " + std::to_string(cache.blocks) + " blocks";
  row("sliding_kv", "gpt_oss windowed cache (" + shape + "): steps that copy blocks",
      std::to_string(t.copy_steps) + " of " + std::to_string(t.steps) + " (" + std::to_string(t.copies) + " blocks; " +
          std::to_string(t.prefill_copy_steps) + " with prefill rows, " + std::to_string(t.replayed_copy_steps) +
          " replayed graphs)",
      ">= 1 prefill, >= 1 replayed", t.prefill_copy_steps >= 1 && t.replayed_copy_steps >= 1);
  row("sliding_kv", "gpt_oss windowed cache: prefix hits, contexts reaching full-only blocks",
      std::to_string(t.hit_tokens) + " tokens, " + std::to_string(t.full_only_reads) + " sequence-steps", ">= 32, >= 1",
      t.hit_tokens >= 32 && t.full_only_reads >= 1);
  const size_t vocab = size_t(spec.vocab_size);
  for (const bool half : {false, true}) {
    const double limit = half ? kLogitsLimitF16 : kLogitsLimitBF16;
    const Agreement a = compare(t.logits[0], t.logits[half ? 2 : 1], vocab, limit);
    const std::string name = std::string("gpt_oss ") + (half ? "fp16" : "bf16") + " windowed cache";
    error_row("sliding_kv", name + " logits vs cpu windowed cache, " + std::to_string(a.rows) + " rows", a.err, limit);
    row("sliding_kv", name + " argmax == cpu",
        std::to_string(a.same) + "/" + std::to_string(a.rows) +
            (a.ties ? " + " + std::to_string(a.ties) + " near-ties" : ""),
        "all but cpu top-2 margin < 2 x limit", a.same + a.ties == a.rows);
  }
}

// The largest |difference| between two runs' first-backend logits; infinite when their
// steps or tokens differ.
double trace_diff(const Trace& a, const Trace& b) {
  double diff = a.steps == b.steps && a.tokens == b.tokens ? 0 : INFINITY;
  for (size_t s = 0; s < a.logits[0].size() && s < b.logits[0].size() && diff == 0; ++s)
    for (size_t i = 0; i < a.logits[0][s].size(); ++i)
      diff = std::max(diff, double(std::fabs(a.logits[0][s][i] - b.logits[0][s][i])));
  return diff;
}

// FP8 (scales included) through the copies: the windowed cache against one that keeps
// every layer for every block (nothing moves, nothing is copied) on the same tokens.
void fp8_windowed_equals_full(const LoadedModel& m) {
  const ModelSpec& spec = m.info.spec;
  const Cache cache = windowed(spec);
  CudaBackend windowed_fp8(spec, bind_stage(spec, m.weights), options(true, true));
  CudaBackend full_fp8(spec, bind_stage(spec, m.weights), options(true, true));
  const Trace a = run_waves(cache, {&windowed_fp8}, &windowed_fp8, spec.sliding_window);
  const Trace b = run_waves({cache.blocks, cache.blocks}, {&full_fp8}, &full_fp8, spec.sliding_window);
  const double diff = trace_diff(a, b);
  row("sliding_kv",
      "gpt_oss fp16 + fp8 KV: windowed cache (" + std::to_string(a.copies) + " block copies) == full cache",
      fmt("max |diff| %.3g", diff), "0 (same values, same kernels)", diff == 0 && a.copies > 0 && b.copies == 0);
}

// A pipeline worker's next session may size its cache otherwise: a backend that served a
// session with a cache of every layer for every block, then re-made at the windowed size
// (its decode graphs, which hold the old cache, recaptured), gives what a fresh one gives.
void second_session(const LoadedModel& m) {
  const ModelSpec& spec = m.info.spec;
  const Cache cache = windowed(spec);
  CudaBackend reused(spec, bind_stage(spec, m.weights), options(true, false));
  CudaBackend fresh(spec, bind_stage(spec, m.weights), options(true, false));
  const Trace first = run_waves({cache.blocks + 8, cache.blocks + 8}, {&reused}, &reused, spec.sliding_window);
  const Trace a = run_waves(cache, {&reused}, &reused, spec.sliding_window);
  const Trace b = run_waves(cache, {&fresh}, &fresh, spec.sliding_window);
  const double diff = trace_diff(a, b);
  row("sliding_kv",
      "gpt_oss fp16: a second session's windowed cache (" + std::to_string(a.copies) +
          " block copies) after one of every layer == a fresh backend's",
      fmt("max |diff| %.3g", diff), "0", diff == 0 && first.steps > 0 && a.copies > 0);
}

// A step whose window reaches a full-only block: the sliding layers have no storage
// there. The backend refuses the batch, and under the emulator the attention kernels,
// given such a block, report a device error.
void window_outside_storage(const LoadedModel& m) {
  const ModelSpec& spec = m.info.spec;
  const Cache cache = windowed(spec);
  CudaBackend gpu(spec, bind_stage(spec, m.weights), options(false, false));
  gpu.init_windowed_kv_cache(cache.blocks, cache.window_blocks, kBlock);
  Batch b;  // one decode row at position 12: its window [5, 12] spans blocks 0 and 1
  b.max_blocks_per_seq = 2;
  b.block_tables = {int32_t(cache.window_blocks), 0};  // block 0 of the sequence is full-only
  b.token_ids = {7};
  b.positions = {12};
  b.slot_mapping = {12 - int32_t(kBlock)};
  b.query_start = {0, 1};
  b.context_lens = {13};
  b.logits_rows = {0};
  std::string error = "accepted";
  try {
    ForwardResult out;
    gpu.forward(b, nullptr, out);
  } catch (const InputError& e) {
    error = e.what();
  }
  row("sliding_kv", "a window reaching a full-only block: refused", error.substr(0, 60), "an error naming the block",
      error.find("sliding-window layers hold") != std::string::npos);
  if (!emulated()) return;

  cuda::AttentionShape s;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim = 16;
  s.block_size = int32_t(kBlock);
  s.max_tokens = 1;
  s.max_seqs = 1;
  s.max_blocks_per_seq = 2;
  s.scale = 0.25f;
  cuda::Attention attention(s);
  const size_t slot_values = 2 * 16, held = 2, stored = 4;  // the layer says 2 blocks; memory for 4
  DeviceArray<cuda::bf16> k(stored * kBlock * slot_values), v(stored * kBlock * slot_values), q(64), out(64);
  DeviceArray<int32_t> ints(std::vector<int32_t>{0, 1, 13, 3, 0, 12});  // query_start, context_lens, table, positions
  Batch host = b;
  host.block_tables = {3, 0};
  attention.prepare(host, nullptr);
  cuda::DeviceBatch db;
  db.query_start = ints.get();
  db.context_lens = ints.get() + 2;
  db.block_tables = ints.get() + 3;
  db.max_blocks_per_seq = 2;
  db.num_tokens = 1;
  db.num_seqs = 1;
  cuda::KvLayer layer{k.get(), v.get(), nullptr, nullptr, int64_t(held)};
  std::string device_error = "no error";
  try {
    attention.run(db, layer, q.get(), out.get(), nullptr, false, {int32_t(spec.sliding_window), nullptr});
    CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const RuntimeError& e) {
    device_error = e.what();
  }
  cudaGetLastError();
  row("sliding_kv", "attention reading block 3 of a layer holding 2: device error", device_error.substr(0, 60),
      "emulator's bounds check", device_error != "no error");
}

}  // namespace

int main() {
  return run_main("sliding_kv", [] {
    // As check_model's gpt-oss rows: the CPU reference gets the device's BF16 matrices (its
    // random router flips top-4 choices when the f32 matrices are rounded).
    const LoadedModel m = with_bf16_matrices(load_model(config_for_model("tests/golden/models/gpt_oss")));
    run_part("sliding_kv", "gpt_oss windowed cache vs cpu", [&] { parity_with_cpu(m); });
    run_part("sliding_kv", "gpt_oss fp8 windowed == full", [&] { fp8_windowed_equals_full(m); });
    run_part("sliding_kv", "window outside the sliding layers' blocks", [&] { window_outside_storage(m); });
    run_part("sliding_kv", "gpt_oss second session", [&] { second_session(m); });
  });
}
