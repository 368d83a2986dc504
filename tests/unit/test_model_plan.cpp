// test_model_plan.cpp — the memory plan (weights, KV bytes per token, blocks under the
// budget, refusal with numbers) and MemAvailable parsing.
#include <doctest/doctest.h>

#include "engine/backend/backend_factory.h"
#include "engine/backend/stage_loader.h"
#include "engine/model/architecture.h"
#include "engine/model/arch.h"
#include "engine/model/memory_plan.h"
#include "engine/model/model_loader.h"
#include "engine/util/mem_info.h"
#include "tests/unit/test_model_golden.h"

using namespace spark;

namespace {
constexpr uint64_t GiB = 1ull << 30;

Config dummy_8b() {
  Config c = config_for_model("tests/golden/configs/llama3_8b");
  c.model.load_format = "dummy";
  return c;
}
}  // namespace

TEST_CASE("memory plan: Llama-3.1-8B with dummy weights, no weight file") {
  Config c = dummy_8b();
  c.model.max_model_len = 8192;
  ModelInfo info = inspect_model(c);
  LayerRange all = full_range(info.spec);
  uint64_t weights = stage_weight_bytes(info, all);
  CHECK(weights == 8030261248ull * 2);  // bf16
  MemoryPlan p = plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{64 * GiB, "test"});
  CHECK(p.parameter_count == 8030261248);
#if SPARKD_CUDA
  // The CUDA backend holds BF16 matrices and f32 norm vectors (65 of 4096 values).
  CHECK(p.weight_bytes == 8030261248ull * 2 + 65 * 4096 * 2);
#endif
  CHECK(p.kv_dtype == "bf16");
  CHECK(p.kv_bytes_per_token == 2ull * 32 * 8 * 128 * 2);  // K and V, 32 layers, 8 heads x 128, bf16
  CHECK(p.kv_block_bytes == p.kv_bytes_per_token * 16);
  CHECK(p.budget_bytes == static_cast<uint64_t>(64.0 * GiB * 0.85));
  uint64_t fixed = p.weight_bytes + p.workspace_bytes + p.reserve_bytes;
  REQUIRE(p.budget_bytes > fixed);
  // The blocks use what is left, and one more would not fit.
  CHECK(static_cast<uint64_t>(p.kv_blocks) * p.kv_block_bytes <= p.budget_bytes - fixed);
  CHECK(static_cast<uint64_t>(p.kv_blocks + 1) * p.kv_block_bytes > p.budget_bytes - fixed);
  CHECK(p.kv_tokens == p.kv_blocks * 16);
  CHECK(p.blocks_per_sequence == 512);
  CHECK(p.fits);
  CHECK_NOTHROW(require_fits(p));
  std::string text = describe_plan(p);
  CHECK(text.find("131072 bytes/token") != std::string::npos);
  CHECK(text.find("fits             yes") != std::string::npos);

  c.engine.kv_cache_dtype = "fp8";
  MemoryPlan fp8 = plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{64 * GiB, "test"});
  CHECK(fp8.kv_dtype == "fp8");
#if SPARKD_CUDA
  // One byte per value plus one scale byte per (token, kv head): 129 bytes per head vector.
  CHECK(fp8.kv_bytes_per_token == 2ull * 32 * 8 * 129);
  // Twice the tokens of BF16 but for the scale bytes (1/129).
  CHECK(fp8.kv_tokens >= p.kv_tokens * 2 * 128 / 129 - 16);
#else
  CHECK(fp8.kv_bytes_per_token == 65536);
#endif
  c.engine.kv_cache_dtype = "auto";
  c.model.dtype = "fp16";
  CHECK(plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{64 * GiB, "test"}).kv_dtype == "fp16");
  // The CPU backend keeps its KV in f32 whatever the model's dtype: the plan counts that.
  MemoryPlan cpu = plan_memory(info.spec, all, stage_footprint(c, info, all, "cpu"), c, MemoryBudget{64 * GiB, "test"});
  CHECK(cpu.kv_dtype == "f32");
  CHECK(cpu.kv_bytes_per_token == 2ull * 32 * 8 * 128 * 4);
}

TEST_CASE("memory plan: a plan that does not fit is refused with the numbers") {
  Config c = dummy_8b();
  ModelInfo info = inspect_model(c);
  LayerRange all = full_range(info.spec);
  MemoryPlan small = plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{8 * GiB, "MemAvailable"});
  CHECK_FALSE(small.fits);
  CHECK_INPUT_ERROR(require_fits(small), "leaves nothing for the KV cache");
  CHECK_INPUT_ERROR(require_fits(small), "weights 14.96 GiB");
  // Weights fit, a full 131072-token sequence does not: the message says what to set.
  MemoryPlan ctx = plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{24 * GiB, "MemAvailable"});
  CHECK_FALSE(ctx.fits);
  CHECK(ctx.kv_blocks > 0);
  CHECK_INPUT_ERROR(require_fits(ctx), "one sequence of 131072 tokens needs 131072");
  CHECK_INPUT_ERROR(require_fits(ctx), "set model.max_model_len to at most " + std::to_string(ctx.kv_tokens));
  c.model.max_model_len = 200000;
  CHECK_INPUT_ERROR(plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{64 * GiB, "x"}), "exceeds the model's 131072 positions");
}

TEST_CASE("memory plan: a pipeline stage plans only its own layers") {
  Config c = dummy_8b();
  c.model.max_model_len = 4096;
  ModelInfo info = inspect_model(c);
  MemoryPlan head = plan_memory(info.spec, LayerRange{0, 16}, stage_footprint(c, info, LayerRange{0, 16}, "cuda"), c, MemoryBudget{64 * GiB, "t"});
  MemoryPlan tail = plan_memory(info.spec, LayerRange{16, 32}, stage_footprint(c, info, LayerRange{16, 32}, "cuda"), c, MemoryBudget{64 * GiB, "t"});
  CHECK(head.kv_bytes_per_token == 65536);
  CHECK(tail.kv_bytes_per_token == 65536);
#if SPARKD_CUDA
  CHECK(head.weight_bytes + tail.weight_bytes == 8030261248ull * 2 + 65 * 4096 * 2);
  // Only the last stage pays for logits (and the sampler).
  CHECK(tail.workspace_bytes - head.workspace_bytes > 64ull * 128256 * 4);
#else
  CHECK(head.weight_bytes + tail.weight_bytes == 8030261248ull * 2);
  CHECK(tail.workspace_bytes - head.workspace_bytes == 64ull * 128256 * 4);
#endif
}

TEST_CASE("memory plan: sliding-window layers are counted at the window blocks on the CPU backend") {
  // The tiny gpt-oss model: 4 layers, sliding and full alternating, window 8, 2 KV heads of 16.
  Config c = config_for_model("tests/golden/models/gpt_oss");
  c.engine.backend = "cpu";
  c.model.max_model_len = 64;
  auto loaded = load_stage(c);
  const MemoryPlan& p = loaded->plan.memory;
  CHECK(p.sliding_layers == 2);
  CHECK(p.sliding_window == 8);
  CHECK(p.kv_bytes_per_token == 4 * 2 * 2 * 16 * 4);  // every layer's f32 K and V, sliding ones too
  CHECK(p.kv_bytes_per_token_sliding == p.kv_bytes_per_token / 2);
  CHECK(p.kv_block_bytes == loaded->backend->kv_block_bytes(c.engine.block_size));  // a block in every layer
  CHECK(describe_plan(p).find("sliding layers   2 of 4 see the last 8 tokens and hold 704 of the") != std::string::npos);

  // Under a 1 GiB budget: 64 windows of at most 3 blocks of 16 and a step of 8192 tokens in
  // every layer, every further block in the two full layers only.
  const ModelInfo& info = loaded->plan.info;
  const StageFootprint f = stage_footprint(c, info, full_range(info.spec), "cpu");
  const MemoryPlan one = plan_memory(info.spec, full_range(info.spec), f, c, MemoryBudget{GiB, "t"});
  CHECK(one.window_only);
  CHECK(one.kv_window_blocks == 64 * 3 + 8192 / 16);
  const uint64_t left = one.budget_bytes - one.weight_bytes - one.workspace_bytes - one.reserve_bytes;
  CHECK(kv_cache_bytes(one, one.kv_blocks) <= left);
  CHECK(kv_cache_bytes(one, one.kv_blocks + 1) > left);
  CHECK(kv_cache_bytes(one, one.kv_blocks + 1) - kv_cache_bytes(one, one.kv_blocks) == one.kv_block_bytes / 2);
  CHECK(one.kv_blocks > 19 * (left / one.kv_block_bytes) / 10);  // almost twice a full-everywhere cache's

  // Peer mode plans the same way (the worker's cache follows the head's session,
  // Welcome::window_blocks, and each box runs the block copies on its layers); a budget
  // smaller than the window blocks keeps every layer for every block.
  Config peer = c;
  peer.peer.enabled = true;
  const MemoryPlan paired = plan_memory(info.spec, full_range(info.spec), f, peer, MemoryBudget{GiB, "t"});
  CHECK(paired.window_only);
  CHECK(paired.kv_window_blocks == one.kv_window_blocks);
  CHECK(paired.kv_blocks == one.kv_blocks);
  CHECK(kv_cache_bytes(one, one.kv_blocks, one.kv_blocks) == uint64_t(one.kv_blocks) * one.kv_block_bytes);
  const uint64_t tight = (one.weight_bytes + one.workspace_bytes + one.reserve_bytes + 100 * one.kv_block_bytes) * 100 / 85;
  const MemoryPlan small = plan_memory(info.spec, full_range(info.spec), f, c, MemoryBudget{tight, "t"});
  CHECK(small.kv_blocks >= 99);
  CHECK(small.kv_window_blocks == small.kv_blocks);

  // A pipeline stage counts the sliding layers it holds: layers 1..3 hold one (layer 2).
  const MemoryPlan tail =
      plan_memory(info.spec, LayerRange{1, 4}, stage_footprint(c, info, LayerRange{1, 4}, "cpu"), c, MemoryBudget{GiB, "t"});
  CHECK(tail.sliding_layers == 1);
  CHECK(tail.kv_bytes_per_token_sliding * 3 == tail.kv_bytes_per_token);
}

TEST_CASE("meminfo: parsed robustly") {
  auto m = parse_meminfo("MemTotal:       24684092 kB\nMemFree:        23392988 kB\nMemAvailable:   24085548 kB\n");
  REQUIRE(m.has_value());
  CHECK(m->total_bytes == 24684092ull * 1024);
  CHECK(m->available_bytes == 24085548ull * 1024);
  CHECK(parse_meminfo("MemAvailable:\t5 kB\r\nMemTotal: 9 kB\r\n")->available_bytes == 5 * 1024);
  CHECK(parse_meminfo("garbage\n\n:::\nMemTotal: 10\nMemAvailable: 7\n")->available_bytes == 7);
  CHECK_FALSE(parse_meminfo("MemTotal: 10 kB\n").has_value());
  CHECK_FALSE(parse_meminfo("MemTotal: 10 kB\nMemAvailable: x kB\n").has_value());
  CHECK_FALSE(parse_meminfo("MemTotal: 10 kB\nMemAvailable: 99999999999999999999999 kB\n").has_value());
  CHECK_FALSE(parse_meminfo("MemTotal: 10 kB\nMemAvailable: 18014398509481984 kB\n").has_value());  // overflows in bytes
  CHECK_FALSE(parse_meminfo("").has_value());
  CHECK(read_host_memory().available_bytes > 0);
}

TEST_CASE("memory plan: the CUDA compute type follows the checkpoint, FP16 for GGUF blocks but Qwen's") {
  Config c = dummy_8b();
  ModelInfo llama = inspect_model(c);
  CHECK(compute_dtype_name(c, llama.spec, "cuda") == "bf16");  // a BF16 checkpoint
  CHECK(compute_dtype_name(c, llama.spec, "cpu") == "f32");
  c.model.dtype = "fp16";
  CHECK(compute_dtype_name(c, llama.spec, "cuda") == "fp16");
  // SmolLM2's Q4_1 blocks (f16 scale x 4-bit value + f16 minimum) keep closer in FP16.
  Config smol = config_for_model("models/SmolLM2-135M-Instruct.Q4_1.gguf");
  ModelInfo gguf = inspect_model(smol);
  CHECK(gguf.spec.dtype == DType::F16);
  CHECK(compute_dtype_name(smol, gguf.spec, "cuda") == "fp16");
  smol.model.dtype = "bf16";
  CHECK(compute_dtype_name(smol, gguf.spec, "cuda") == "bf16");
  // The Qwen families stay in BF16 whatever the file holds: FP16 overflows their activations.
  smol.model.dtype = "auto";
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"}) {
    ModelSpec qwen = gguf.spec;
    qwen.arch = find_hf_architecture(arch);
    CHECK(compute_dtype_name(smol, qwen, "cuda") == "bf16");
  }
  ModelSpec mistral = gguf.spec;
  mistral.arch = find_hf_architecture("MistralForCausalLM");
  CHECK(compute_dtype_name(smol, mistral, "cuda") == "fp16");
}

// Qwen3.5-35B-A3B's shape (tests/golden/configs/qwen3_5_35b_a3b: transformers'
// Qwen3_5MoeConfig, whose defaults are that model, with its published context and RoPE
// base): 40 layers of which every 4th attends. Only those keep K and V; the 30 Gated
// DeltaNet layers hold a state per sequence, which the plan keeps for max_num_seqs, and as
// many state checkpoints as engine.state_checkpoints asks (twice max_num_seqs by default).
TEST_CASE("memory plan: a hybrid counts KV for its attention layers and a recurrent state per sequence") {
  Config c = config_for_model("tests/golden/configs/qwen3_5_35b_a3b");
  c.model.load_format = "dummy";
  c.model.max_model_len = 65536;
  c.engine.max_num_seqs = 16;
  ModelInfo info = inspect_model(c);
  LayerRange all = full_range(info.spec);
  MemoryPlan p = plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{100 * GiB, "test"});
  // 10 attention layers x K and V x 2 kv heads x 256 x 2 bytes (bf16).
  CHECK(p.kv_bytes_per_token == 10ull * 2 * 2 * 256 * 2);
  // 30 layers x (conv state: (2 x 16 x 128 + 32 x 128) channels x 3 taps + 32 heads x 128 x 128) x f32.
  CHECK(p.state_bytes_per_sequence == 30ull * ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * 4);
  CHECK(p.state_checkpoints == 32);
  CHECK(p.state_slots == 16 + 32);
  const uint64_t fixed = p.weight_bytes + p.workspace_bytes + p.reserve_bytes + 48 * p.state_bytes_per_sequence;
  CHECK(static_cast<uint64_t>(p.kv_blocks) * p.kv_block_bytes <= p.budget_bytes - fixed);
  CHECK(static_cast<uint64_t>(p.kv_blocks + 1) * p.kv_block_bytes > p.budget_bytes - fixed);
  CHECK(describe_plan(p).find("recurrent state  62.8 MiB per sequence x 48 (engine.max_num_seqs, + 32 engine.state_checkpoints)") !=
        std::string::npos);
  c.engine.state_checkpoints = 0;  // none: the running sequences' states alone
  MemoryPlan bare = plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{100 * GiB, "test"});
  CHECK(bare.state_slots == 16);
  CHECK(bare.kv_blocks > p.kv_blocks);
  CHECK(describe_plan(bare).find("x 16 (engine.max_num_seqs) = ") != std::string::npos);
  c.engine.state_checkpoints = -1;
  MemoryPlan cpu = plan_memory(info.spec, all, stage_footprint(c, info, all, "cpu"), c, MemoryBudget{100 * GiB, "test"});
  CHECK(cpu.kv_bytes_per_token == 10ull * 2 * 2 * 256 * 4);
  CHECK(cpu.state_bytes_per_sequence == p.state_bytes_per_sequence);
  // With speculation each sequence's state has a snapshot beside it: twice the slots.
  c.engine.speculative = "ngram";
  MemoryPlan spec = plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{100 * GiB, "test"});
  CHECK(spec.state_slots == 32 + 32);
  CHECK(spec.kv_blocks < p.kv_blocks);
  CHECK(describe_plan(spec).find("x 64 (engine.max_num_seqs, each with its snapshot for drafts, + 32 engine.state_checkpoints)") !=
        std::string::npos);
}

// Qwen3-Next-80B-A3B's shape (tests/golden/configs/qwen3_next_80b_a3b: transformers'
// Qwen3NextConfig, whose defaults are that model, with its published intermediate size,
// context and RoPE base): 48 layers, every 4th attending, 512 experts and a shared one in
// each. Its parameters as transformers counts them on the meta device: 79,674,391,296.
TEST_CASE("memory plan: Qwen3-Next-80B-A3B's parameters, KV and recurrent state") {
  Config c = config_for_model("tests/golden/configs/qwen3_next_80b_a3b");
  c.model.load_format = "dummy";
  c.model.max_model_len = 65536;
  c.engine.max_num_seqs = 8;
  ModelInfo info = inspect_model(c);
  CHECK(parameter_count(info.spec) == 79674391296ull);
  LayerRange all = full_range(info.spec);
  MemoryPlan p = plan_memory(info.spec, all, stage_footprint(c, info, all, "cuda"), c, MemoryBudget{200 * GiB, "test"});
  CHECK(p.kv_bytes_per_token == 12ull * 2 * 2 * 256 * 2);
  CHECK(p.state_bytes_per_sequence == 36ull * ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * 4);
  CHECK(p.state_slots == 8 + 16);
}

// A peer stage of DeltaNet layers only keeps no K or V: it fits whatever the context, with
// block tables for every sequence's full length.
TEST_CASE("memory plan: a stage of recurrent layers only needs no KV cache") {
  Config c = config_for_model("tests/golden/configs/qwen3_5_35b_a3b");
  c.model.load_format = "dummy";
  c.model.max_model_len = 65536;
  c.engine.max_num_seqs = 4;
  ModelInfo info = inspect_model(c);
  const LayerRange first_three{0, 3};  // layer 3 is the first attention layer
  MemoryPlan p = plan_memory(info.spec, first_three, stage_footprint(c, info, first_three, "cuda"), c,
                             MemoryBudget{100 * GiB, "test"});
  CHECK(p.kv_bytes_per_token == 0);
  CHECK(p.state_bytes_per_sequence == 3ull * ((2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128) * 4);
  CHECK(p.fits);
  CHECK(p.kv_blocks == 4 * p.blocks_per_sequence);
}

TEST_CASE("memory plan: a draft model's weights, workspace and K and V per block are planned beside the model's") {
  // The tiny gpt-oss model drafted for by the tiny Llama (4 layers, 2 KV heads of 16, f32
  // on the CPU): every block holds both models' K and V, and the sliding layers keep
  // every block, since the draft's cache follows the block tables.
  Config c = config_for_model("tests/golden/models/gpt_oss");
  c.engine.backend = "cpu";
  c.model.max_model_len = 64;
  const MemoryPlan alone = plan_stage(c).memory;
  c.engine.speculative = "draft";
  c.engine.speculative_model = "tests/golden/models/llama";
  auto loaded = load_stage(c);
  const MemoryPlan& p = loaded->plan.memory;
  REQUIRE(loaded->draft_backend != nullptr);
  const ModelInfo draft = inspect_model(draft_model_config(c));
  CHECK(p.draft_weight_bytes == stage_weight_bytes(draft, full_range(draft.spec)));
  CHECK(p.draft_kv_bytes_per_token == uint64_t(draft.spec.num_layers * 2 * draft.spec.num_kv_heads * draft.spec.head_dim * 4));
  CHECK(p.kv_block_bytes ==
        loaded->backend->kv_block_bytes(c.engine.block_size) + loaded->draft_backend->kv_block_bytes(c.engine.block_size));
  CHECK(p.draft_workspace_bytes > 0);
  CHECK(alone.window_only);
  CHECK(!p.window_only);
  CHECK(p.kv_window_blocks == p.kv_blocks);
  CHECK(describe_plan(p).find("draft model") != std::string::npos);

  // A budget that holds the model and its cache but not the draft besides is refused
  // with the draft's part named.
  const StageFootprint f = stage_footprint(c, loaded->plan.info, full_range(loaded->plan.info.spec), "cpu");
  StageFootprint with_draft = f;
  with_draft.draft_weight_bytes = p.draft_weight_bytes;
  with_draft.draft_kv_bytes_per_token = p.draft_kv_bytes_per_token;
  with_draft.draft_workspace_bytes = 64 * GiB;
  const MemoryPlan big = plan_memory(loaded->plan.info.spec, full_range(loaded->plan.info.spec), with_draft, c,
                                     MemoryBudget{GiB, "t"});
  CHECK(!big.fits);
  CHECK(big.problem.find("draft model") != std::string::npos);

  // A draft with recurrent layers plans a state and a snapshot per running sequence.
  c.engine.speculative_model = "tests/golden/models/qwen3_5";
  const StagePlan hybrid = plan_stage(c);
  const StageFootprint hf = stage_footprint(draft_model_config(c), *hybrid.draft, full_range(hybrid.draft->spec), "cpu");
  CHECK(hf.state_bytes_per_sequence > 0);
  CHECK(hybrid.memory.draft_workspace_bytes ==
        hf.workspace_bytes + hf.reserve_bytes + 2 * uint64_t(c.engine.max_num_seqs) * hf.state_bytes_per_sequence);
  // A draft with fewer positions than the context is refused before anything loads.
  Config smol = config_for_model("models/SmolLM2-135M-Instruct.Q4_1.gguf");  // 8192 positions
  smol.engine.backend = "cpu";
  smol.engine.speculative = "draft";
  smol.engine.speculative_model = "tests/golden/models/llama";  // 256
  CHECK_THROWS_WITH_AS(plan_stage(smol), doctest::Contains("256 positions, fewer than the model's context of 8192"),
                       InputError);
  smol.model.max_model_len = 256;
  CHECK(plan_stage(smol).draft.has_value());
}
