// test_cpu_forward.cpp — CPU backend logits against transformers' golden logits, paged
// attention across steps, mixed batches and a two-stage layer split.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/backend_factory.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/matmul.h"
#include "engine/config.h"
#include "engine/model/architecture.h"
#include "engine/model/model_loader.h"
#include "engine/util/check.h"

using namespace spark;

namespace {

const char* kGoldenDir = "tests/golden/models/";
// gemma3 (tests/gen/gen_gemma3.py): sandwich (1 + w) norms, a scaled embedding, sliding layers
// (window 8) with their own RoPE beside linearly scaled full ones, query_pre_attn_scalar.
// gemma4 / gemma4_moe (tests/gen/gen_gemma4.py): full layers with wider heads and fewer KV
// heads than the sliding ones, K = V (gemma4), proportional RoPE, the value norm, layer
// scalars, soft-capped logits; the MoE block beside the dense MLP (gemma4_moe).
const char* kModels[] = {"llama", "qwen2", "qwen3", "qwen3_moe", "qwen3_moe_separated", "qwen3_bf16", "gpt_oss", "gpt_oss_separated",
                         "qwen3_yarn", "gemma3", "gemma4", "gemma4_moe"};

struct Golden {
  std::vector<std::vector<int32_t>> sequences;
  std::vector<std::vector<float>> logits;  // [len x vocab] per sequence
  int64_t vocab = 0;
};

Golden read_golden(const std::string& dir) {
  std::ifstream f(dir + "/golden.json");
  REQUIRE(f.good());
  auto j = nlohmann::json::parse(f);
  Golden g;
  g.vocab = j["vocab_size"].get<int64_t>();
  for (size_t i = 0; i < j["sequences"].size(); ++i) {
    g.sequences.push_back(j["sequences"][i].get<std::vector<int32_t>>());
    std::ifstream lf(dir + "/" + j["logits"][i].get<std::string>(), std::ios::binary);
    REQUIRE(lf.good());
    std::vector<float> v(g.sequences.back().size() * static_cast<size_t>(g.vocab));
    lf.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    REQUIRE(lf.gcount() == static_cast<std::streamsize>(v.size() * sizeof(float)));
    g.logits.push_back(std::move(v));
  }
  return g;
}

// n little-endian f32 values from the file at `path` (golden logits and hidden states).
std::vector<float> read_f32(const std::string& path, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v(n);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * 4));
  REQUIRE(in.gcount() == std::streamsize(n * 4));
  return v;
}

// max |a - b| / max |b|: the error relative to the scale of the logits.
double rel_error(const float* a, const float* b, size_t n) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::fabs(static_cast<double>(b[i])));
  }
  return diff / (mag + 1e-30);
}

constexpr int kBlockSize = 16;
constexpr int kNumBlocks = 32;

// One sequence's slice of a step: the tokens of context positions [begin, end), the
// whole context living in `blocks`.
struct Chunk {
  const std::vector<int32_t>* tokens;
  int32_t begin, end;
  std::vector<int32_t> blocks;
  int32_t state_slot = 0;  // a hybrid's recurrent state
};

Batch make_batch(const std::vector<Chunk>& chunks, bool all_logits) {
  Batch b;
  int32_t max_blocks = 0;
  for (const auto& c : chunks) max_blocks = std::max<int32_t>(max_blocks, static_cast<int32_t>(c.blocks.size()));
  b.max_blocks_per_seq = max_blocks;
  b.query_start.push_back(0);
  for (const auto& c : chunks) {
    for (int32_t p = c.begin; p < c.end; ++p) {
      if (all_logits || p == c.end - 1) b.logits_rows.push_back(b.num_tokens());
      b.token_ids.push_back((*c.tokens)[static_cast<size_t>(p)]);
      b.positions.push_back(p);
      b.slot_mapping.push_back(c.blocks[static_cast<size_t>(p / kBlockSize)] * kBlockSize + p % kBlockSize);
    }
    b.query_start.push_back(b.num_tokens());
    b.context_lens.push_back(c.end);
    b.state_slots.push_back(c.state_slot);
    for (int32_t i = 0; i < max_blocks; ++i)
      b.block_tables.push_back(i < static_cast<int32_t>(c.blocks.size()) ? c.blocks[static_cast<size_t>(i)] : 0);
  }
  return b;
}

std::vector<int32_t> blocks_for(int32_t len, int32_t first) {
  std::vector<int32_t> blocks;
  // Deliberately scattered, descending ids: block tables, not contiguity, must matter.
  for (int32_t i = 0; i * kBlockSize < len; ++i) blocks.push_back(first - 3 * i);
  return blocks;
}

// The llama.cpp-layout copies of the tiny models (a name ending in .gguf), qwen3_next_mtp and
// nemotron_h_mtp (the tiny Qwen3-Next and Nemotron-H with random MTP heads,
// tests/gen/gen_qwen3_5_mtp.py and gen_nemotron_h_mtp.py) are not committed:
// tests/gen/golden_gguf.py writes them at test time into SPARKD_GOLDEN_GGUF (make sets it to
// build/golden/models' absolute path and writes them first), else build/golden/models.
// Every other model is a folder of tests/golden/models.
std::string model_path(const std::string& name) {
  const bool written = name.ends_with(".gguf") || name == "qwen3_next_mtp" || name == "nemotron_h_mtp";
  if (!written) return std::string(kGoldenDir) + name;
  const char* env = std::getenv("SPARKD_GOLDEN_GGUF");
  const std::string path = std::string(env && *env ? env : "build/golden/models") + "/" + name;
  INFO(path << " is written at test time: make build/golden/models/.stamp, or build/venv/bin/python "
               "tests/gen/golden_gguf.py");
  REQUIRE(std::filesystem::exists(path));
  return path;
}

LoadedModel load(const std::string& name, LayerRange range = {}) {
  return load_model(config_for_model(model_path(name)), range);
}

// Every row's logits of `seq` run `piece` tokens a step, each step resuming where the one
// before left (a hybrid's state in `state_slot`).
std::vector<float> logits_in_pieces(CpuBackend& backend, const std::vector<int32_t>& seq, int32_t piece, size_t vocab,
                                    int32_t state_slot = 0) {
  const auto len = static_cast<int32_t>(seq.size());
  std::vector<float> got(seq.size() * vocab);
  for (int32_t at = 0; at < len; at += piece) {
    ForwardResult out;
    backend.forward(make_batch({{&seq, at, std::min(len, at + piece), blocks_for(len, 30), state_slot}}, true), nullptr,
                    out);
    std::copy(out.logits.begin(), out.logits.end(), got.begin() + std::ptrdiff_t(size_t(at) * vocab));
  }
  return got;
}

// Each golden sequence prefilled alone in one step: the worst relative logit error.
double worst_prefill_error(CpuBackend& backend, const Golden& g) {
  double worst = 0;
  for (size_t s = 0; s < g.sequences.size(); ++s) {
    const auto& seq = g.sequences[s];
    const int32_t len = static_cast<int32_t>(seq.size());
    ForwardResult out;
    backend.forward(make_batch({{&seq, 0, len, blocks_for(len, 30)}}, true), nullptr, out);
    REQUIRE(out.logits.size() == g.logits[s].size());
    worst = std::max(worst, rel_error(out.logits.data(), g.logits[s].data(), out.logits.size()));
  }
  return worst;
}

}  // namespace

TEST_CASE("cpu forward: tiny models match transformers' logits within 1e-4") {
  for (const char* name : kModels) {
    CAPTURE(name);
    const Golden g = read_golden(std::string(kGoldenDir) + name);
    LoadedModel m = load(name);
    CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
    backend.init_kv_cache(kNumBlocks, kBlockSize);
    const double worst = worst_prefill_error(backend, g);
    MESSAGE(std::string(name) << ": max relative logit error " << worst);
    CHECK(worst < 1e-4);
  }
}

// Gemma 3 as llama.cpp's converter writes it (tests/gen/gguf_gemma3.py, at test time: norms
// with the one added, no layer types or query scale in the file, the sliding layers' RoPE
// base as rope.freq_base_swa), and the folder it is written from (6 layers, every 6th full,
// as llama.cpp's loader has them): transformers' logits, whole and in chunks of 5 (past the
// window of 8 across steps).
// Gemma 4 likewise (tests/gen/gguf_gemma4.py: the layer types as flags, the two head widths
// and KV head counts per layer, proportional RoPE as rope_freqs, the router's scales as
// ".scale" tensors, the experts' gate and up rows in one stacked tensor).
TEST_CASE("cpu forward: Gemma 3 and 4 as GGUF files (llama.cpp's gemma3, gemma4) match transformers' logits") {
  for (const auto& [name, golden] : {std::pair<std::string, std::string>{"gemma3_gguf", "gemma3_gguf"},
                                     {"gemma3.gguf", "gemma3_gguf"}, {"gemma4.gguf", "gemma4"},
                                     {"gemma4_moe.gguf", "gemma4_moe"}}) {
    CAPTURE(name);
    const Golden g = read_golden(std::string(kGoldenDir) + golden);
    LoadedModel m = load(name);
    CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
    backend.init_kv_cache(kNumBlocks, kBlockSize);
    const double worst = worst_prefill_error(backend, g);
    MESSAGE(name << ": max relative logit error " << worst);
    CHECK(worst < 1e-4);
    const std::vector<float> got = logits_in_pieces(backend, g.sequences[3], 5, size_t(g.vocab));
    CHECK(rel_error(got.data(), g.logits[3].data(), got.size()) < 1e-4);
  }
}

// A hidden row is the LM head's input: the final hidden state times the LM head gives
// transformers' logits. Every row is both a hidden and a logits row, and also each alone.
TEST_CASE("cpu forward: hidden rows are the final hidden states transformers' logits come from") {
  for (const char* name : {"llama", "qwen3_moe", "gpt_oss"}) {
    CAPTURE(name);
    const Golden g = read_golden(std::string(kGoldenDir) + name);
    LoadedModel m = load(name);
    const ModelSpec& spec = m.info.spec;
    const StageWeights stage = bind_stage(spec, m.weights);
    CpuBackend backend(spec, stage, 2);
    backend.init_kv_cache(kNumBlocks, kBlockSize);
    const auto H = size_t(spec.hidden_size), V = size_t(g.vocab);
    std::vector<float> head(V * H);
    for (size_t v = 0; v < V; ++v) cpu::decode_row(*stage.lm_head, int64_t(v), head.data() + v * H);
    const auto& seq = g.sequences[2];
    const auto len = static_cast<int32_t>(seq.size());
    for (bool with_logits : {true, false}) {
      Batch b = make_batch({{&seq, 0, len, blocks_for(len, 30)}}, true);
      b.hidden_rows = b.logits_rows;
      if (!with_logits) b.logits_rows.clear();
      ForwardResult out;
      backend.forward(b, nullptr, out);
      REQUIRE(out.final_hidden.size() == size_t(len) * H);
      CHECK(out.logits.size() == (with_logits ? size_t(len) * V : 0));
      std::vector<float> logits(size_t(len) * V);
      for (size_t r = 0; r < size_t(len); ++r)
        for (size_t v = 0; v < V; ++v) {
          double dot = 0;
          for (size_t i = 0; i < H; ++i) dot += double(out.final_hidden[r * H + i]) * head[v * H + i];
          logits[r * V + v] = float(dot);
        }
      CHECK(rel_error(logits.data(), g.logits[2].data(), logits.size()) < 1e-4);
    }
  }
}

// Qwen3.5/3.6 hybrids (tests/gen/gen_qwen3_5.py): three Gated DeltaNet layers, then an
// attention layer with an output gate, partial rotary and zero-centred norms; routed and
// shared experts, or a dense MLP. Qwen3-Next (tests/gen/gen_qwen3_next.py): the same layers
// from fused DeltaNet projections and per-expert tensors, two MoE layers and two dense
// ones, value heads narrower than key heads; and as an FP8 checkpoint with 16x16 block
// scales, its fused projections' scales unfused with them (golden logits from transformers
// over e4m3 x scale). And the Qwen3.5 models as llama.cpp's converter writes them
// (tests/gen/gen_qwen3_5_gguf.py: qwen35moe, qwen35; norms offset by one, ssm_a, value heads
// tiled) and Qwen3-Next as it writes qwen3next (tests/gen/gen_qwen3_next_gguf.py: in_proj_qkvz
// split, ssm_ba fused, dense layers without a router), against the same golden logits; those
// three files are written at test time (model_path).
// Sequences of 1, 7, 70 and 130 tokens.
// qwen3_5_moe_mtp is qwen3_5_moe with an MTP head, which the model's loader leaves out.
// nemotron_h (tests/gen/gen_nemotron_h.py): Nemotron-H's blocks, each one mixer or one
// feed-forward: Mamba-2 (two in a row), attention without RoPE, squared-ReLU MLPs and MoEs
// with the sigmoid router, its score-correction bias and a shared expert; sequences of 1,
// 7, 40 and 70 tokens, past transformers' SSD chunks of 16. nemotron_h_latent's MoE is
// Nemotron-3-Super's LatentMoE (experts 16 wide behind fc1/fc2_latent_proj).
const char* kHybrids[] = {"qwen3_5_moe",      "qwen3_5",      "qwen3_next",      "qwen3_next_fp8",
                          "qwen3_5_moe.gguf", "qwen3_5.gguf", "qwen3_next.gguf", "qwen3_5_moe_mtp",
                          "nemotron_h",  "nemotron_h_latent"};

TEST_CASE("cpu forward: Qwen3.5, Qwen3-Next and Nemotron-H hybrids match transformers' logits within 1e-4, whole and in chunks of 1, 7, 64, 100") {
  for (const std::string name : kHybrids) {
    CAPTURE(name);
    const Golden g = read_golden(std::string(kGoldenDir) + name.substr(0, name.find(".gguf")));
    LoadedModel m = load(name);
    CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
    backend.init_kv_cache(kNumBlocks, kBlockSize);
    backend.init_state_slots(4);
    const double whole = worst_prefill_error(backend, g);
    MESSAGE(name << ": whole prompts, max relative logit error " << whole);
    CHECK(whole < 1e-4);
    // The longest prompt in pieces, each step resuming the state the one before left.
    for (int32_t piece : {1, 7, 64, 100}) {
      CAPTURE(piece);
      const std::vector<float> got = logits_in_pieces(backend, g.sequences[3], piece, size_t(g.vocab), 2);
      CHECK(rel_error(got.data(), g.logits[3].data(), got.size()) < 1e-4);
    }
  }
}

TEST_CASE("cpu forward: Qwen3.5's, Qwen3-Next's and Nemotron-3-Super's MTP heads match the numpy reference within 1e-4, whole and row by row") {
  // tests/gen/gen_qwen3_5_mtp.py: rows of (token, incoming hidden state), the head's own
  // forward (fc over the normed embedding and hidden state, one gated attention + MoE
  // layer, its norm, the model's LM head) in float64 numpy. The same head read from the
  // Hugging Face folder and from llama.cpp's layout (the block after the layers, nextn.*);
  // Qwen3-Next's (experts one by one, settings at the config's top level), written at test time.
  // Nemotron-3-Super's (tests/gen/gen_nemotron_h_mtp.py, also written at test time): the same
  // fc (eh_proj) before an attention block and a LatentMoE block, then final_layernorm.
  for (const std::string file : {"qwen3_5_moe_mtp", "qwen3_5_moe_mtp.gguf", "qwen3_next_mtp", "nemotron_h_mtp"}) {
    CAPTURE(file);
    const std::string dir = file.starts_with("qwen3_5") ? std::string(kGoldenDir) + "qwen3_5_moe_mtp" : model_path(file);
    std::ifstream f(dir + "/mtp_golden.json");
    REQUIRE(f.good());
    const auto j = nlohmann::json::parse(f);
    const LoadedModel head = load_mtp_head(load(file).info);
    const ModelSpec& spec = head.info.spec;
    CpuBackend backend(spec, bind_stage(spec, head.weights), 2);
    backend.init_kv_cache(kNumBlocks, kBlockSize);
    const auto H = size_t(spec.hidden_size), V = size_t(spec.vocab_size);
    auto read = [&](const std::string& name, size_t n) { return read_f32(dir + "/" + name, n); };
    for (size_t s = 0; s < j["sequences"].size(); ++s) {
      CAPTURE(s);
      const auto seq = j["sequences"][s].get<std::vector<int32_t>>();
      const auto len = int32_t(seq.size());
      const std::vector<float> hidden = read(j["hidden"][s].get<std::string>(), seq.size() * H);
      const std::vector<float> want = read(j["logits"][s].get<std::string>(), seq.size() * V);
      ForwardResult out;
      backend.forward(make_batch({{&seq, 0, len, blocks_for(len, 30)}}, true), hidden.data(), out);
      const double whole = rel_error(out.logits.data(), want.data(), want.size());
      std::vector<float> stepped;
      for (int32_t r = 0; r < len; ++r) {
        backend.forward(make_batch({{&seq, r, r + 1, blocks_for(len, 30)}}, true), hidden.data() + size_t(r) * H, out);
        stepped.insert(stepped.end(), out.logits.begin(), out.logits.end());
      }
      const double rows = rel_error(stepped.data(), want.data(), want.size());
      MESSAGE(file << " MTP head, " << len << " rows: max relative logit error " << whole << " whole, " << rows
                           << " row by row");
      CHECK(whole < 1e-4);
      CHECK(rows < 1e-4);
    }
    // Without hidden states the head has nothing to run on.
    const std::vector<int32_t> one{5};
    ForwardResult out;
    CHECK_THROWS_WITH_AS(backend.forward(make_batch({{&one, 0, 1, blocks_for(1, 30)}}, true), nullptr, out),
                         doctest::Contains("MTP head"), InputError);
  }
}

TEST_CASE("cpu forward: Gemma 4's assistant drafts as transformers' within 1e-4, over the model's own K and V") {
  // tests/gen/gen_gemma4_assistant.py: the tiny Gemma 4 runs a prompt; its assistant then
  // drafts three tokens at the position after it, reading the model's embedding, its final
  // hidden state and the K and V of its last sliding and last full layer (the sliding one's
  // last window - 1 tokens), each later draft its own output hidden state; logits over its
  // 4 best of 16 token clusters only.
  const std::string dir = std::string(kGoldenDir) + "gemma4_assistant";
  std::ifstream f(dir + "/assistant_golden.json");
  REQUIRE(f.good());
  const auto j = nlohmann::json::parse(f);
  const LoadedModel model = load("gemma4");
  const LoadedModel assistant = load("gemma4_assistant");
  const ModelSpec& ms = model.info.spec;
  const ModelSpec& as = assistant.info.spec;
  REQUIRE(as.is_assistant());
  CpuBackend target(ms, bind_stage(ms, model.weights), 2);
  CpuBackend drafter(as, bind_stage(as, assistant.weights), 2);
  target.init_kv_cache(kNumBlocks, kBlockSize);
  drafter.init_kv_cache(kNumBlocks, kBlockSize);
  CHECK(drafter.kv_block_bytes(kBlockSize) == 0);  // it keeps no K and V of its own
  const std::vector<int32_t> one{5};
  ForwardResult out;
  Batch b = make_batch({{&one, 0, 1, blocks_for(1, 30)}}, true);
  std::vector<float> h(size_t(ms.hidden_size));
  CHECK_THROWS_WITH_AS(drafter.forward(b, h.data(), out), doctest::Contains("none was attached"), InputError);
  drafter.attach_model(target);
  const auto H = size_t(ms.hidden_size), V = size_t(as.vocab_size);
  auto read = [&](const std::string& name, size_t n) { return read_f32(dir + "/" + name, n); };
  for (const auto& c : j["cases"]) {
    auto tokens = c["prompt"].get<std::vector<int32_t>>();
    const auto inputs = c["draft_inputs"].get<std::vector<int32_t>>();
    const auto p = int32_t(tokens.size());
    CAPTURE(p);
    const std::vector<int32_t> blocks = blocks_for(p + 1, 30);
    Batch prompt = make_batch({{&tokens, 0, p, blocks}}, false);
    prompt.hidden_rows = prompt.logits_rows;
    target.forward(prompt, nullptr, out);
    std::vector<float> hidden = out.final_hidden;
    REQUIRE(hidden.size() == H);
    const std::vector<float> want_logits = read(c["logits"].get<std::string>(), inputs.size() * V);
    const std::vector<float> want_hidden = read(c["hidden"].get<std::string>(), inputs.size() * H);
    tokens.push_back(inputs[0]);
    for (size_t d = 0; d < inputs.size(); ++d) {
      CAPTURE(d);
      // One row: the token at position p, over the model's K and V of the p tokens before it.
      tokens[size_t(p)] = inputs[d];
      Batch row = make_batch({{&tokens, p, p + 1, blocks}}, true);
      row.context_lens = {p};
      row.hidden_rows = row.logits_rows;
      drafter.forward(row, hidden.data(), out);
      REQUIRE(out.logits.size() == V);
      REQUIRE(out.final_hidden.size() == H);
      const double logits_error = rel_error(out.logits.data(), want_logits.data() + d * V, V);
      const double hidden_error = rel_error(out.final_hidden.data(), want_hidden.data() + d * H, H);
      MESSAGE("assistant after " << p << " tokens, draft " << d << ": max relative error " << logits_error
                                 << " (logits), " << hidden_error << " (hidden state)");
      CHECK(logits_error < 1e-4);
      CHECK(hidden_error < 1e-4);
      // Only 4 of 16 clusters of 8 tokens get logits; the rest share the smallest minus 1.
      const float low = *std::min_element(out.logits.begin(), out.logits.end());
      CHECK(std::count(out.logits.begin(), out.logits.end(), low) == int64_t(V) - 32);
      hidden = out.final_hidden;
    }
  }
}

TEST_CASE("cpu forward: a hybrid's sequences keep their own states, side by side and in a reused slot") {
  const Golden g = read_golden(std::string(kGoldenDir) + "qwen3_5_moe");
  LoadedModel m = load("qwen3_5_moe");
  CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
  backend.init_kv_cache(kNumBlocks, kBlockSize);
  backend.init_state_slots(3);
  const auto &a = g.sequences[3], &b = g.sequences[2];  // 130 and 70 tokens
  const auto ba = blocks_for(130, 31), bb = blocks_for(70, 30);  // disjoint (ids step by 3)
  const size_t V = static_cast<size_t>(g.vocab);
  std::vector<float> got_a(a.size() * V), got_b(b.size() * V);
  // b runs in slot 1 after a sequence of garbage left its state there; a in slot 0.
  const std::vector<int32_t> garbage(40, 7);
  ForwardResult out;
  backend.forward(make_batch({{&garbage, 0, 40, blocks_for(40, 29), 1}}, false), nullptr, out);
  for (int32_t at = 0; at < 130; at += 50) {
    std::vector<Chunk> chunks = {{&a, at, std::min(130, at + 50), ba, 0}};
    if (at < 70) chunks.push_back({&b, at, std::min(70, at + 50), bb, 1});
    backend.forward(make_batch(chunks, true), nullptr, out);
    size_t r = 0;
    for (const Chunk& c : chunks)
      for (int32_t p = c.begin; p < c.end; ++p, ++r)
        std::copy_n(out.logits.begin() + std::ptrdiff_t(r * V), V,
                    (c.tokens == &a ? got_a : got_b).begin() + std::ptrdiff_t(size_t(p) * V));
  }
  CHECK(rel_error(got_a.data(), g.logits[3].data(), got_a.size()) < 1e-4);
  CHECK(rel_error(got_b.data(), g.logits[2].data(), got_b.size()) < 1e-4);
  // Slots are checked: out of range, or two sequences in one.
  CHECK_THROWS_WITH_AS(backend.forward(make_batch({{&b, 0, 5, bb, 3}}, true), nullptr, out),
                       doctest::Contains("state slot 3 outside [0, 3)"), InputError);
  CHECK_THROWS_WITH_AS(backend.forward(make_batch({{&b, 0, 5, bb, 1}, {&a, 0, 5, ba, 1}}, true), nullptr, out),
                       doctest::Contains("share a state slot"), InputError);
}

// Quantized files against a reference forward pass over an independent reader's
// dequantization of the same file (gguf's; e4m3 * scale): a GGUF Llama Q4_K_M (Q4_K and
// Q6_K blocks) and a Qwen3 mixing Q8_0, Q4_K and Q6_K (tests/gen/gen_q4_k_m_models.py), and FP8 checkpoints with 128x128 block scales
// and per-channel scales (tests/gen/gen_fp8_models.py).
TEST_CASE("cpu forward: tiny K-quant and FP8 models match the reference logits within 1e-4") {
  for (const char* name : {"llama_q4_k_m/model.gguf", "qwen3_k_quants/model.gguf", "llama_fp8_block", "qwen3_fp8_channel"}) {
    CAPTURE(name);
    const std::string path = std::string(kGoldenDir) + name;
    const Golden g = read_golden(path.substr(0, path.find("/model.gguf")));
    LoadedModel m = load_model(config_for_model(path));
    CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
    backend.init_kv_cache(kNumBlocks, kBlockSize);
    const double worst = worst_prefill_error(backend, g);
    MESSAGE(std::string(name) << ": max relative logit error " << worst);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("cpu forward: chunked prefill and decode across steps in mixed batches equal the golden logits") {
  for (const char* name : kModels) {
    CAPTURE(name);
    const Golden g = read_golden(std::string(kGoldenDir) + name);
    LoadedModel m = load(name);
    CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
    backend.init_kv_cache(kNumBlocks, kBlockSize);
    const auto& a = g.sequences[3];  // 40 tokens
    const auto& b = g.sequences[2];  // 23 tokens
    const auto ba = blocks_for(40, 31), bb = blocks_for(23, 20);
    const size_t V = static_cast<size_t>(g.vocab);
    std::vector<float> got_a(a.size() * V), got_b(b.size() * V);
    auto take = [&](const ForwardResult& out, const Batch& batch, const std::vector<Chunk>& chunks) {
      size_t r = 0;
      for (size_t c = 0; c < chunks.size(); ++c) {
        auto& dst = chunks[c].tokens == &a ? got_a : got_b;
        for (int32_t p = chunks[c].begin; p < chunks[c].end; ++p, ++r)
          std::copy(out.logits.begin() + static_cast<long>(r * V), out.logits.begin() + static_cast<long>((r + 1) * V),
                    dst.begin() + static_cast<long>(p * V));
      }
      CHECK(r == batch.logits_rows.size());
    };
    // Step 1: a's first chunk alone. Step 2: a's second chunk beside b's first chunk.
    // Step 3: b's rest beside a's chunk ending on a block edge. Then decode-style
    // single-token steps for both, interleaved with a's final chunk.
    std::vector<std::vector<Chunk>> steps = {
        {{&a, 0, 13, ba}},
        {{&a, 13, 16, ba}, {&b, 0, 9, bb}},
        {{&b, 9, 22, bb}, {&a, 16, 32, ba}},
        {{&a, 32, 33, ba}, {&b, 22, 23, bb}},
        {{&a, 33, 40, ba}},
    };
    for (const auto& chunks : steps) {
      Batch batch = make_batch(chunks, true);
      ForwardResult out;
      backend.forward(batch, nullptr, out);
      take(out, batch, chunks);
    }
    const double ea = rel_error(got_a.data(), g.logits[3].data(), got_a.size());
    const double eb = rel_error(got_b.data(), g.logits[2].data(), got_b.size());
    MESSAGE(std::string(name) << ": chunked max relative error " << std::max(ea, eb));
    CHECK(ea < 1e-4);
    CHECK(eb < 1e-4);
  }
}

TEST_CASE("cpu forward: logits only for the requested rows") {
  const Golden g = read_golden(std::string(kGoldenDir) + "qwen3");
  LoadedModel m = load("qwen3");
  CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
  backend.init_kv_cache(kNumBlocks, kBlockSize);
  const auto& seq = g.sequences[2];
  Batch b = make_batch({{&seq, 0, 23, blocks_for(23, 10)}}, false);
  REQUIRE(b.logits_rows == std::vector<int32_t>{22});
  ForwardResult out;
  backend.forward(b, nullptr, out);
  REQUIRE(out.logits.size() == static_cast<size_t>(g.vocab));
  CHECK(rel_error(out.logits.data(), g.logits[2].data() + 22 * g.vocab, out.logits.size()) < 1e-4);
  CHECK(out.hidden.empty());
}

TEST_CASE("cpu forward: a two-stage layer split gives the full model's logits") {
  // gemma3: the embedding is scaled on the first stage only; gemma4_moe: each stage's cache
  // has its own layers' shapes (a sliding layer, then a full one).
  for (const char* name : {"llama", "qwen3_moe", "gpt_oss", "gemma3", "gemma4_moe"}) {
    CAPTURE(name);
    const Golden g = read_golden(std::string(kGoldenDir) + name);
    LoadedModel full = load(name);
    const int64_t split = 1;
    LoadedModel first = load(name, {0, split});
    LoadedModel second = load(name, {split, full.info.spec.num_layers});
    CpuBackend a(first.info.spec, bind_stage(first.info.spec, first.weights), 2), b(second.info.spec, bind_stage(second.info.spec, second.weights), 2);
    CHECK(a.layers().last_layer == split);
    CHECK(b.layers().first_layer == split);
    CHECK(a.kv_block_bytes(16) + b.kv_block_bytes(16) == CpuBackend(full.info.spec, bind_stage(full.info.spec, full.weights), 1).kv_block_bytes(16));
    a.init_kv_cache(kNumBlocks, kBlockSize);
    b.init_kv_cache(kNumBlocks, kBlockSize);
    const auto& seq = g.sequences[3];
    const auto blocks = blocks_for(40, 25);
    std::vector<float> got(seq.size() * static_cast<size_t>(g.vocab));
    // Two steps, so stage B's cache carries state from stage A's hidden states too.
    for (auto [lo, hi] : {std::pair{0, 29}, std::pair{29, 40}}) {
      Batch batch = make_batch({{&seq, lo, hi, blocks}}, true);
      ForwardResult ha, lb;
      a.forward(batch, nullptr, ha);
      REQUIRE(ha.logits.empty());
      REQUIRE(ha.hidden.size() == static_cast<size_t>((hi - lo) * full.info.spec.hidden_size));
      CHECK_THROWS_AS(b.forward(batch, nullptr, lb), InputError);  // stage B has no embedding
      b.forward(batch, ha.hidden.data(), lb);
      REQUIRE(lb.logits.size() == static_cast<size_t>((hi - lo) * g.vocab));
      std::copy(lb.logits.begin(), lb.logits.end(), got.begin() + static_cast<long>(lo * g.vocab));
    }
    CHECK(rel_error(got.data(), g.logits[3].data(), got.size()) < 1e-4);
  }
}

// tests/gen/gen_gemma3.py's softcap.json: the gemma3 weights with final_logit_softcapping set,
// as Gemma 2 and 4 configs have it, and transformers' capped logits of one sequence.
TEST_CASE("cpu forward: gemma3 with a final logit softcap matches transformers' capped logits") {
  const std::string dir = std::string(kGoldenDir) + "gemma3";
  std::ifstream f(dir + "/softcap.json");
  REQUIRE(f.good());
  const auto j = nlohmann::json::parse(f);
  const Golden plain = read_golden(dir);
  const auto seq = j["sequences"][0].get<std::vector<int32_t>>();
  REQUIRE(seq == plain.sequences[3]);
  const size_t V = size_t(plain.vocab), n = seq.size() * V;
  std::vector<float> want(n);
  std::ifstream lf(dir + "/" + j["logits"][0].get<std::string>(), std::ios::binary);
  lf.read(reinterpret_cast<char*>(want.data()), std::streamsize(n * sizeof(float)));
  REQUIRE(lf.gcount() == std::streamsize(n * sizeof(float)));
  REQUIRE(rel_error(want.data(), plain.logits[3].data(), n) > 0.1);  // the cap matters on these logits

  LoadedModel m = load("gemma3");
  ModelSpec spec = m.info.spec;
  spec.final_logit_softcap = j["final_logit_softcapping"].get<double>();
  CpuBackend backend(spec, bind_stage(spec, m.weights), 2);
  backend.init_kv_cache(kNumBlocks, kBlockSize);
  const auto len = static_cast<int32_t>(seq.size());
  ForwardResult out;
  backend.forward(make_batch({{&seq, 0, len, blocks_for(len, 30)}}, true), nullptr, out);
  REQUIRE(out.logits.size() == n);
  double abs_err = 0;
  for (size_t i = 0; i < n; ++i) abs_err = std::max(abs_err, std::fabs(double(out.logits[i]) - want[i]));
  const double rel = rel_error(out.logits.data(), want.data(), n);
  MESSAGE("gemma3, logits capped at " << spec.final_logit_softcap << ": max abs error " << abs_err << ", relative " << rel);
  CHECK(rel < 1e-4);
  // Without the cap, the same sequence gives transformers' plain logits.
  CpuBackend uncapped(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
  uncapped.init_kv_cache(kNumBlocks, kBlockSize);
  uncapped.forward(make_batch({{&seq, 0, len, blocks_for(len, 30)}}, true), nullptr, out);
  double plain_abs = 0;
  for (size_t i = 0; i < n; ++i) plain_abs = std::max(plain_abs, std::fabs(double(out.logits[i]) - plain.logits[3][i]));
  MESSAGE("gemma3, uncapped: max abs error " << plain_abs << ", relative " << rel_error(out.logits.data(), plain.logits[3].data(), n));
  CHECK(rel_error(out.logits.data(), plain.logits[3].data(), n) < 1e-4);
}

// The multimodal classes' layout, written from the gemma3 and gemma4_moe folders (Gemma 4's
// stacked experts included): the config under text_config,
// each tensor under model.language_model.* (the same bytes), and a vision-tower tensor that
// is skipped.
TEST_CASE("cpu forward: Gemma 3 and 4 as their ConditionalGeneration classes (text_config, model.language_model.*) give the same logits") {
  for (const auto& [name, hf_class] : {std::pair<std::string, std::string>{"gemma3", "Gemma3ForConditionalGeneration"},
                                       std::pair<std::string, std::string>{"gemma4_moe", "Gemma4ForConditionalGeneration"}}) {
    CAPTURE(name);
    namespace fs = std::filesystem;
    using nlohmann::json;
    const fs::path src = std::string(kGoldenDir) + name;
    const fs::path dir = fs::temp_directory_path() / ("sparkd_gemma_mm_" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ifstream cf(src / "config.json");
    json text = json::parse(cf);
    text.erase("architectures");
    const json top = {{"architectures", {hf_class}}, {"text_config", text},
                      {"vision_config", {{"hidden_size", 8}}}, {"torch_dtype", "bfloat16"}};
    std::ofstream(dir / "config.json") << top.dump();
    fs::copy_file(src / "generation_config.json", dir / "generation_config.json");
    std::ifstream wf(src / "model.safetensors", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(wf)), std::istreambuf_iterator<char>());
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    const json header = json::parse(bytes.substr(8, header_len));
    std::string data = bytes.substr(8 + header_len);
    json renamed;
    for (const auto& [tensor, entry] : header.items())
      renamed[tensor == "__metadata__" ? tensor : "model.language_model." + tensor.substr(6)] = entry;  // after "model."
    renamed["model.vision_tower.vision_model.post_layernorm.weight"] = {
        {"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {data.size(), data.size() + 8}}};
    data.append(8, '\0');
    std::string text_header = renamed.dump();
    text_header.append((8 - text_header.size() % 8) % 8, ' ');
    const uint64_t new_len = text_header.size();
    std::ofstream out(dir / "model.safetensors", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&new_len), 8);
    out << text_header << data;
    out.close();

    const Golden g = read_golden(src.string());
    LoadedModel m = load_model(config_for_model(dir.string()));
    CHECK(m.info.spec.arch == find_hf_architecture(hf_class));
    CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
    backend.init_kv_cache(kNumBlocks, kBlockSize);
    const double worst = worst_prefill_error(backend, g);
    MESSAGE(name << " as " << hf_class << ": max relative logit error " << worst);
    CHECK(worst < 1e-4);
    fs::remove_all(dir);
  }
}

// Batches come from the scheduler or a validated peer frame: a bad one reaching the
// backend is a bug, and the backend stops on it (SPARK_CHECK) rather than compute garbage.
bool aborts_in_child(const std::function<void()>& fn) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // The test runner's crash handler must not report (or write its report file) from here.
    std::signal(SIGABRT, SIG_DFL);
    std::freopen("/dev/null", "w", stderr);
    fn();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

TEST_CASE("cpu forward: bad batches and token ids abort as broken invariants") {
  LoadedModel m = load("qwen2");
  CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 1);
  backend.init_kv_cache(4, kBlockSize);
  std::vector<int32_t> seq = {5, 6, 7};
  ForwardResult out;
  Batch ok = make_batch({{&seq, 0, 3, {1}}}, true);
  backend.forward(ok, nullptr, out);
  CHECK(out.logits.size() == 3 * 256);
  Batch bad_token = ok;
  bad_token.token_ids[1] = 256;
  CHECK(aborts_in_child([&] { backend.forward(bad_token, nullptr, out); }));
  Batch bad_slot = ok;
  bad_slot.slot_mapping[0] = 4 * kBlockSize;
  CHECK(aborts_in_child([&] { backend.forward(bad_slot, nullptr, out); }));
  Batch bad_block = ok;
  bad_block.block_tables[0] = 9;
  CHECK(aborts_in_child([&] { backend.forward(bad_block, nullptr, out); }));
  Batch short_ctx = ok;
  short_ctx.context_lens[0] = 2;
  CHECK(aborts_in_child([&] { backend.forward(short_ctx, nullptr, out); }));
}

TEST_CASE("cpu forward: a windowed cache refuses steps reaching past the sliding layers' blocks") {
  // The tiny gpt-oss (window 8): 8 blocks of 16, the sliding layers holding blocks 0-2. A
  // pipeline worker gets its steps from the peer, so these are errors, not aborts.
  LoadedModel m = load("gpt_oss");
  CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 1);
  backend.init_windowed_kv_cache(8, 3, kBlockSize);
  std::vector<int32_t> seq(40, 7);
  ForwardResult out;
  // Tokens 0-31 in blocks 2 and 1, then 32-39 in block 0: the window of token 32 starts at
  // 25, in block 1. A full-only block (5) behind the window is fine.
  backend.forward(make_batch({{&seq, 0, 32, {2, 1}}}, false), nullptr, out);
  backend.forward(make_batch({{&seq, 32, 40, {5, 1, 0}}}, false), nullptr, out);
  CHECK(out.logits.size() == 256);
  CHECK_THROWS_WITH_AS(backend.forward(make_batch({{&seq, 32, 40, {2, 5, 0}}}, false), nullptr, out),
                       doctest::Contains("block 5 in sequence 0's window is not one of the 3 blocks"), InputError);
  CHECK_THROWS_WITH_AS(backend.forward(make_batch({{&seq, 32, 40, {2, 1, 6}}}, false), nullptr, out),
                       doctest::Contains("is outside the 3 blocks the sliding-window layers hold"), InputError);
}

TEST_CASE("cpu forward: the backend factory builds the CPU backend and refuses cuda") {
  LoadedModel m = load("qwen2");
  Config c = config_for_model(std::string(kGoldenDir) + "qwen2");
  c.engine.cpu_threads = 2;
  for (const char* kind : {"auto", "cpu"}) {
    c.engine.backend = kind;
    auto b = make_backend(c, m.info.spec, bind_stage(m.info.spec, m.weights));
    CHECK(b->describe() == "cpu (2 threads)");
  }
  c.engine.backend = "cuda";
  CHECK_THROWS_AS(make_backend(c, m.info.spec, bind_stage(m.info.spec, m.weights)), InputError);
}

// gpt_oss.gguf: tests/gen/gen_gptoss.py's GGUF copy of gpt_oss, written at test time (model_path).
TEST_CASE("cpu forward: gpt-oss as a GGUF file (MXFP4 experts) gives transformers' logits") {
  const Golden g = read_golden(std::string(kGoldenDir) + "gpt_oss");
  LoadedModel m = load("gpt_oss.gguf");
  CHECK(m.info.spec.arch == find_hf_architecture("GptOssForCausalLM"));
  CHECK(m.info.spec.sliding_window == 8);
  CpuBackend backend(m.info.spec, bind_stage(m.info.spec, m.weights), 2);
  backend.init_kv_cache(kNumBlocks, kBlockSize);
  const double worst = worst_prefill_error(backend, g);
  MESSAGE("gpt_oss.gguf: max relative logit error " << worst);
  CHECK(worst < 1e-4);
}
