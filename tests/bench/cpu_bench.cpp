// cpu_bench.cpp — prefill and decode throughput of the CPU backend on a model file;
// prints one JSON object. Built by `make` as $(BUILD)/cpu_bench (and by `make test`, so it
// cannot rot); run by tests/bench/cpu_bench.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/config.h"
#include "engine/model/model_loader.h"
#include "engine/model/stage_weights.h"

using namespace spark;

namespace {

constexpr int kBlockSize = 16;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// S sequences, each owning a contiguous run of blocks; `lens` tokens already cached.
struct Seqs {
  int blocks_per_seq;
  std::vector<int32_t> lens;
};

// One step: sequence s appends `add[s]` tokens (token ids are arbitrary but valid).
Batch step_batch(Seqs& seqs, const std::vector<int>& add, int64_t vocab) {
  Batch b;
  b.max_blocks_per_seq = seqs.blocks_per_seq;
  b.query_start.push_back(0);
  for (size_t s = 0; s < add.size(); ++s) {
    for (int i = 0; i < add[s]; ++i) {
      const int32_t p = seqs.lens[s] + i;
      b.token_ids.push_back(static_cast<int32_t>((1000 + 31 * p + 7 * s) % vocab));
      b.positions.push_back(p);
      b.slot_mapping.push_back(static_cast<int32_t>(s) * seqs.blocks_per_seq * kBlockSize + p);
    }
    seqs.lens[s] += add[s];
    b.logits_rows.push_back(b.num_tokens() - 1);
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(seqs.lens[s]);
    for (int k = 0; k < seqs.blocks_per_seq; ++k) b.block_tables.push_back(static_cast<int32_t>(s) * seqs.blocks_per_seq + k);
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: cpu_bench MODEL [threads] [prompt_len] [decode_tokens] [batch]\n");
    return 2;
  }
  const std::string model = argv[1];
  const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
  const int prompt_len = argc > 3 ? std::atoi(argv[3]) : 128;
  const int decode_tokens = argc > 4 ? std::atoi(argv[4]) : 64;
  const int batch = argc > 5 ? std::atoi(argv[5]) : 16;
  try {
    LoadedModel m = load_model(config_for_model(model));
    const StageWeights stage = bind_stage(m.info.spec, m.weights);
    CpuBackend backend(m.info.spec, stage, threads);
    const int64_t vocab = m.info.spec.vocab_size;
    const int blocks_per_seq = (prompt_len + decode_tokens + kBlockSize - 1) / kBlockSize;
    backend.init_kv_cache(static_cast<int64_t>(batch) * blocks_per_seq, kBlockSize);
    ForwardResult out;

    // Warm-up: touches every weight page once (the file is mapped lazily).
    {
      Seqs w{blocks_per_seq, {0}};
      Batch b = step_batch(w, {8}, vocab);
      backend.forward(b, nullptr, out);
    }
    // Prefill: one prompt_len-token prompt in one step.
    Seqs one{blocks_per_seq, {0}};
    Batch pb = step_batch(one, {prompt_len}, vocab);
    double t0 = now_s();
    backend.forward(pb, nullptr, out);
    const double prefill_s = now_s() - t0;

    // Decode, batch 1: decode_tokens steps after that prompt.
    t0 = now_s();
    for (int i = 0; i < decode_tokens; ++i) {
      Batch b = step_batch(one, {1}, vocab);
      backend.forward(b, nullptr, out);
    }
    const double decode1_s = now_s() - t0;

    // Decode, batch B: B sequences with a prompt_len/4-token prompt each, then steps of B rows.
    Seqs many{blocks_per_seq, std::vector<int32_t>(static_cast<size_t>(batch), 0)};
    Batch mb = step_batch(many, std::vector<int>(static_cast<size_t>(batch), std::max(1, prompt_len / 4)), vocab);
    backend.forward(mb, nullptr, out);
    const int steps = std::max(1, decode_tokens / 2);
    t0 = now_s();
    for (int i = 0; i < steps; ++i) {
      Batch b = step_batch(many, std::vector<int>(static_cast<size_t>(batch), 1), vocab);
      backend.forward(b, nullptr, out);
    }
    const double decodeb_s = now_s() - t0;

    std::printf("{\"engine\": \"sparkd-cpu\", \"threads\": %d, \"prompt_len\": %d, \"prefill_tok_s\": %.1f, "
                "\"decode_b1_tok_s\": %.1f, \"decode_batch\": %d, \"decode_bN_tok_s\": %.1f}\n",
                threads, prompt_len, prompt_len / prefill_s, decode_tokens / decode1_s, batch,
                static_cast<double>(batch) * steps / decodeb_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
