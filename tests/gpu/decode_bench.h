// decode_bench.h — the whole-model step benchmarks of make gpu-check (check_model's 8B,
// check_moe's 30B-A3B, check_gptoss_moe's gpt-oss-20b): synthetic decode and prefill
// batches over a backend's own blocks, the median time of a whole sampled step, the
// decode tok/s rows at batch 1, 16 and 64 beside the copy and read bandwidths and the
// batch-1 bound of the read bandwidth
// and the prefill rows at 512 and 2,048 tokens; and dummy weights of every layer made from
// a few (repeat_layers), so a step times all of a large model's layers.
#pragma once
#include <algorithm>
#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/weights.h"
#include "engine/step/sampling_params.h"
#include "engine/step/step.h"
#include "tests/gpu/gpu_check.h"

namespace spark::gpu_check {

// A decode step of `seqs` sequences at context `ctx`, one row each; sequence s owns blocks
// [s * blocks_per_seq, (s + 1) * blocks_per_seq) of `block` tokens, and state slot s (read
// by a hybrid's recurrent layers only).
inline Batch decode_batch(int seqs, int ctx, int blocks_per_seq, int block) {
  Batch b;
  b.max_blocks_per_seq = blocks_per_seq;
  b.query_start.push_back(0);
  for (int s = 0; s < seqs; ++s) {
    const int pos = ctx - 1;
    b.token_ids.push_back(1 + s);
    b.positions.push_back(pos);
    b.slot_mapping.push_back((s * blocks_per_seq + pos / block) * block + pos % block);
    b.query_start.push_back(s + 1);
    b.context_lens.push_back(ctx);
    for (int k = 0; k < blocks_per_seq; ++k) b.block_tables.push_back(s * blocks_per_seq + k);
    b.logits_rows.push_back(s);
    b.state_slots.push_back(s);
  }
  return b;
}

// One sequence's prefill of `tokens` tokens over blocks [0, blocks_per_seq) and state slot 0.
inline Batch prefill_batch(int tokens, int blocks_per_seq) {
  Batch b;
  b.max_blocks_per_seq = blocks_per_seq;
  b.query_start = {0, tokens};
  b.context_lens = {tokens};
  for (int t = 0; t < tokens; ++t) {
    b.token_ids.push_back(1 + t % 1000);
    b.positions.push_back(t);
    b.slot_mapping.push_back(t);
  }
  for (int k = 0; k < blocks_per_seq; ++k) b.block_tables.push_back(k);
  b.logits_rows = {tokens - 1};
  b.state_slots = {0};
  return b;
}

// Median wall time of a whole step (forward_sample synchronises on the sampled ids), after
// three untimed ones: eager, graph capture, replay.
inline double step_ms(Backend& backend, const Batch& b, int runs = 20) {
  SamplingParams greedy_params;
  greedy_params.temperature = 0.0;
  std::vector<int32_t> context = {1};
  std::vector<SampleRow> rows(b.logits_rows.size(), SampleRow{&greedy_params, context, 1, 0, 0});
  StepOutput out;
  for (int i = 0; i < 3; ++i) backend.forward_sample(b, nullptr, rows, out);
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    backend.forward_sample(b, nullptr, rows, out);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// INFO rows "`label` decode b=B" at batch 1, 16 and 64, context 512, and "`label` prefill
// T=..." of one sequence's 512 and 2,048 tokens, of a backend whose KV cache holds 64 x
// blocks_per_seq blocks (at least 2,048 tokens a sequence) and whose steps take 2,048
// tokens. `bytes_per_token` is what a batch-1 token must read, whose time at the read
// bandwidth bounds batch 1.
inline void step_rate_rows(const std::string& check, const std::string& label, Backend& backend, int blocks_per_seq,
                           int block, double bytes_per_token, double copy_gbs, const std::string& about) {
  for (int B : {1, 16, 64}) {
    const double step = step_ms(backend, decode_batch(B, 512, blocks_per_seq, block));
    info(check, label + " decode b=" + std::to_string(B),
         fmt("%.0f tok/s", B / (step * 1e-3)) + fmt(" (%.2f ms/step", step) + about + ")",
         decode_roof(copy_gbs, bytes_per_token));
  }
  for (int T : {512, 2048}) {
    const double step = step_ms(backend, prefill_batch(T, blocks_per_seq), 5);
    info(check, label + " prefill T=" + std::to_string(T),
         fmt("%.0f tok/s", T / (step * 1e-3)) + fmt(" (%.1f ms/step", step) + about + ")", "one sequence's prompt");
  }
}

// `built` (make_dummy_weights for layers [0, built_layers)) as weights of `num_layers`
// layers: layer l's tensors are layer l % built_layers's host tensors under layer l's names,
// so the backend uploads a device copy of every layer (a step reads them all) while the
// host makes only a few. Each tensor name's "layers.N." is the layer index.
inline Weights repeat_layers(const Weights& built, int64_t built_layers, int64_t num_layers) {
  Weights w = built;
  const std::regex layer(R"((^|\.)layers\.(\d+)\.)");
  for (const auto& [name, t] : built.all()) {
    std::smatch m;
    if (!std::regex_search(name, m, layer)) continue;
    for (int64_t l = std::stoll(m[2]) + built_layers; l < num_layers; l += built_layers) {
      Tensor copy = t;
      copy.name = m.prefix().str() + m[1].str() + "layers." + std::to_string(l) + "." + m.suffix().str();
      w.add(std::move(copy));
    }
  }
  w.set_range({0, num_layers});
  return w;
}

}  // namespace spark::gpu_check
