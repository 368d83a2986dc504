// test_cpu_smollm2.cpp — greedy decoding of the default SmolLM2 GGUF on the CPU backend,
// token for token against transformers' f32 greedy output (tests/golden/smollm2_greedy.json).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/config.h"
#include "engine/model/model_loader.h"

using namespace spark;

TEST_CASE("cpu smollm2: greedy continuations of 8 prompts match the reference for 32 tokens") {
  const std::string model_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  // `make test` fetches the model first (`make model`).
  REQUIRE_MESSAGE(std::filesystem::exists(model_path), "run `make model` to fetch " << model_path);
  std::ifstream f("tests/golden/smollm2_greedy.json");
  REQUIRE(f.good());
  const auto golden = nlohmann::json::parse(f);
  const auto& cases = golden["cases"];
  const int new_tokens = golden["new_tokens"].get<int>();
  REQUIRE(cases.size() >= 8);

  LoadedModel m = load_model(config_for_model(model_path));
  CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
  const int block_size = 16;
  const int S = static_cast<int>(cases.size());
  std::vector<std::vector<int32_t>> seqs;
  size_t longest = 0;
  for (const auto& c : cases) {
    seqs.push_back(c["prompt_ids"].get<std::vector<int32_t>>());
    longest = std::max(longest, seqs.back().size());
  }
  const int blocks_per_seq = static_cast<int>((longest + new_tokens + block_size - 1) / block_size);
  backend.init_kv_cache(S * blocks_per_seq, block_size);

  // All prompts decode together, as the engine batches them: one prefill step holding
  // every prompt, then one step per token with a row per sequence.
  std::vector<std::vector<int32_t>> generated(static_cast<size_t>(S));
  std::vector<size_t> done(static_cast<size_t>(S), 0);  // tokens already in the cache
  for (int step = 0; step <= new_tokens - 1; ++step) {
    Batch b;
    b.max_blocks_per_seq = blocks_per_seq;
    b.query_start.push_back(0);
    for (int s = 0; s < S; ++s) {
      auto& seq = seqs[static_cast<size_t>(s)];
      for (size_t p = done[static_cast<size_t>(s)]; p < seq.size(); ++p) {
        b.token_ids.push_back(seq[p]);
        b.positions.push_back(static_cast<int32_t>(p));
        b.slot_mapping.push_back(static_cast<int32_t>((s * blocks_per_seq) * block_size + p));
      }
      b.logits_rows.push_back(b.num_tokens() - 1);
      b.query_start.push_back(b.num_tokens());
      b.context_lens.push_back(static_cast<int32_t>(seq.size()));
      for (int k = 0; k < blocks_per_seq; ++k) b.block_tables.push_back(s * blocks_per_seq + k);
      done[static_cast<size_t>(s)] = seq.size();
    }
    ForwardResult out;
    backend.forward(b, nullptr, out);
    const int64_t V = m.info.spec.vocab_size;
    REQUIRE(out.logits.size() == static_cast<size_t>(S * V));
    for (int s = 0; s < S; ++s) {
      const float* row = out.logits.data() + s * V;
      const int32_t next = static_cast<int32_t>(std::max_element(row, row + V) - row);
      generated[static_cast<size_t>(s)].push_back(next);
      seqs[static_cast<size_t>(s)].push_back(next);
    }
  }
  int matching_prompts = 0;
  for (int s = 0; s < S; ++s) {
    const auto want = cases[static_cast<size_t>(s)]["output_ids"].get<std::vector<int32_t>>();
    const auto& got = generated[static_cast<size_t>(s)];
    size_t same = 0;
    while (same < want.size() && same < got.size() && want[same] == got[same]) ++same;
    CAPTURE(cases[static_cast<size_t>(s)]["prompt"].get<std::string>());
    CHECK_MESSAGE(same == static_cast<size_t>(new_tokens), "first " << same << " of " << new_tokens << " tokens match");
    matching_prompts += same == static_cast<size_t>(new_tokens);
  }
  MESSAGE("smollm2 greedy: " << matching_prompts << " of " << S << " prompts match for " << new_tokens << " tokens");
}
