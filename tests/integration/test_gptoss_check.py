"""`sparkd check` on gpt-oss-20b- and gpt-oss-120b-shaped dummies (config.json only, as the
checkpoints publish their shapes; MXFP4 experts): every number of the plan is counted
again here from the config alone.

`--device gb10` counts the weights as the CUDA backend lays them out: MXFP4 expert
matrices packed (17 bytes per 32 values, codes and scales apart), the other matrices in
BF16, vectors and the router in f32. Both backends hold the sliding-window layers' K and V
for the window blocks only (the windows of max_num_seqs sequences and one step's tokens),
and their plans count that.
"""
import json
import re

import pytest

from conftest import REPO, run_sparkd

GIB = 1 << 30
BUDGET_GB10 = int(int(120e9 / GIB * GIB) * 0.85)  # parse_device's 120 GB x memory_fraction 0.85


def gptoss_config(layers, experts):
    """The published gpt-oss shapes; 20b and 120b differ in layers and experts only."""
    return {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
            "intermediate_size": 2880, "num_hidden_layers": layers, "num_attention_heads": 64,
            "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": experts, "num_experts_per_tok": 4,
            "experts_per_token": 4, "vocab_size": 201088, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-05, "rope_theta": 150000, "attention_bias": True, "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"] * (layers // 2), "swiglu_limit": 7.0,
            "tie_word_embeddings": False, "eos_token_id": 200002, "pad_token_id": 199999,
            "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "original_max_position_embeddings": 4096, "truncate": False},
            "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
                "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}


def checkpoint_bytes(c):
    """(all bytes, bytes a batch-1 decode step reads, expert bytes) as the checkpoint stores them."""
    h, hd, nh, nkv, L, E, I = (c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"],
                               c["num_hidden_layers"], c["num_local_experts"], c["intermediate_size"])
    bf16 = 2
    attention = (h * hd * (2 * nh + 2 * nkv) + hd * (nh + 2 * nkv) + h + nh) * bf16  # q k v o, biases, sinks
    router = (E * h + E) * bf16
    norms = 2 * h * bf16
    expert_matrices = E * (2 * I * h + h * I) // 32 * 17  # MXFP4 gate, up, down
    expert_biases = E * (2 * I + h) * bf16
    experts = expert_matrices + expert_biases
    table = c["vocab_size"] * h * bf16
    total = L * (attention + router + norms + experts) + 2 * table + h * bf16  # embedding, LM head, final norm
    read = total - table - L * experts * (1 - c["num_experts_per_tok"] / E)
    return total, read, L * experts


def device_bytes(c):
    """(all bytes, bytes a batch-1 decode step reads) as the CUDA backend's DeviceWeights lays
    the weights out: each piece 256-byte aligned; matrices in BF16 but the router (f32) and
    the MXFP4 expert stacks (codes [rows, k/2], then E8M0 scales [rows, k/32]); vectors in f32."""
    h, hd, nh, nkv, L, E, I = (c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"],
                               c["num_hidden_layers"], c["num_local_experts"], c["intermediate_size"])

    def align(n):
        return (n + 255) // 256 * 256

    def mxfp4(rows, k):
        return align(rows * k // 2) + align(rows * k // 32)

    k = c["num_experts_per_tok"]
    qkv = (nh + 2 * nkv) * hd
    dense = align(qkv * h * 2) + align(qkv * 4) + 2 * align(h * 4) + align(h * nh * hd * 2) + align(h * 4) + \
        align(nh * 4) + align(E * h * 4) + align(E * 4)
    experts = mxfp4(E * 2 * I, h) + mxfp4(E * h, I) + align(E * 2 * I * 4) + align(E * h * 4)
    table = align(c["vocab_size"] * h * 2)
    total = L * (dense + experts) + 2 * table + align(h * 4)
    read = total - table - L * experts * (1 - k / E)
    return total, read


def field(pattern, text):
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in:\n{text}"
    return m


@pytest.mark.parametrize("name,layers,experts", [("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128)])
def test_check_device_gb10_plans_gptoss_with_packed_mxfp4_experts(tmp_path, name, layers, experts):
    c = gptoss_config(layers, experts)
    (tmp_path / "config.json").write_text(json.dumps(c))
    r = run_sparkd("check", "--model", tmp_path, "--set", 'model.load_format="dummy"', "--device", "gb10")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout

    total, read = device_bytes(c)
    file_total, _, _ = checkpoint_bytes(c)
    assert 1.0 < total / file_total < 1.003, (total, file_total)  # f32 vectors and router: the only growth
    weights = float(field(r"weights +([\d.]+) GiB on the device", out).group(1))
    assert abs(weights - total / GIB) < 0.006, (weights, total / GIB)
    m = field(r"decode \(proj\.\) +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token / 218 GB/s", out)
    rate, read_gib = int(m.group(1)), float(m.group(2))
    assert abs(read_gib - read / GIB) < 0.006, (read_gib, read / GIB)
    assert abs(rate - 218e9 / read) <= 1, (rate, 218e9 / read)

    kv_per_token = layers * 2 * c["num_key_value_heads"] * c["head_dim"] * 2  # K and V, BF16, every layer
    sliding = layers // 2
    sliding_per_token = sliding * kv_per_token // layers
    block = 16
    # Window blocks: 64 sequences x (ceil(127 / 16) + 2) + 8192 / 16 (memory_plan.cpp's
    # window_blocks_needed at the default engine limits).
    window_blocks = 64 * ((128 - 1 + block - 1) // block + 2) + 8192 // block
    assert f"bf16, {kv_per_token} bytes/token" in out
    m = field(rf"sliding layers +{sliding} of {layers} see the last 128 tokens and hold (\d+) of the (\d+) blocks "
              rf"\(.*; {sliding_per_token} of the {kv_per_token} bytes/token\)", out)
    assert int(m.group(1)) == window_blocks

    # KV blocks: what the gb10 budget leaves after weights, workspace and the 1 GiB reserve,
    # the window blocks in every layer, the others in the full-attention layers only.
    ws = field(r"workspace +([\d.]+) MiB activations \+ 1\.00 GiB reserve", out)
    workspace = float(ws.group(1)) * (1 << 20)
    kv = field(r"kv blocks +(\d+) \((\d+) tokens, ([\d.]+) GiB\)", out)
    blocks = int(kv.group(1))
    assert int(m.group(2)) == blocks
    left = BUDGET_GB10 - total - workspace - GIB
    want = window_blocks + (left - window_blocks * kv_per_token * block) / ((kv_per_token - sliding_per_token) * block)
    assert abs(blocks - want) <= 1, (blocks, want)  # the workspace is printed to 0.1 MiB
    kv_bytes = float(kv.group(3)) * GIB
    assert abs(kv_bytes - (window_blocks * kv_per_token + (blocks - window_blocks) * (kv_per_token - sliding_per_token))
               * block) <= 0.005 * GIB
    assert blocks * block > 1.9 * kv_bytes / kv_per_token  # tokens those bytes would hold in every layer
    print(f"{name}: {weights} GiB, {blocks * block} KV tokens, ~{rate} tok/s projected")


# llama.cpp's measured batch-1 decode on one Spark with the GGUF conversions, whose only
# advantage over the Hugging Face checkpoints is Q8_0 attention and head.
LLAMA_CPP_TOK_S = {"gpt-oss-20b": 84.1, "gpt-oss-120b": 59.0}


@pytest.mark.parametrize("name,layers,experts", [("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128)])
def test_check_device_gb10_counts_attention_and_head_quantized_to_q8_0_at_load(tmp_path, name, layers, experts):
    """[model] quantize = "q8_0" (the MXFP4 experts are already quantized; the embedding is
    kept): a token reads the attention matrices and the LM head as Q8_0, 34 bytes per 32
    values, which is what llama.cpp's GGUF conversion reads; the plan also shows the rate as
    stored."""
    c = gptoss_config(layers, experts)
    (tmp_path / "config.json").write_text(json.dumps(c))
    r = run_sparkd("check", "--model", tmp_path, "--set", 'model.load_format="dummy"', "--set",
                   'model.quantize="q8_0"', "--set", 'model.quantize_keep=["embedding"]', "--device", "gb10")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    h, hd, nh, nkv, L = c["hidden_size"], c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"], layers
    _, stored_read = device_bytes(c)
    attention = L * h * hd * (2 * nh + 2 * nkv)  # q, k, v, o values
    head = c["vocab_size"] * h
    read = stored_read - (attention + head) * (2 - 34 / 32)
    assert 2.5e9 < read < 2.7e9 if layers == 24 else 3.5e9 < read < 3.7e9
    m = field(r"decode \(proj\.\) +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token / 218 GB/s", out)
    rate, read_gib = int(m.group(1)), float(m.group(2))
    assert abs(read_gib * GIB / read - 1) < 0.02, (read_gib * GIB, read)
    assert f"quantize         q8_0 (attention, mlp, experts, lm_head) at load: BF16 x{4 * L + 1}" in out, out
    m = field(r"as stored +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token", out)
    assert abs(float(m.group(2)) - stored_read / GIB) < 0.006
    print(f"{name}: {read_gib} GiB a token quantized, ~{rate} tok/s projected (as stored ~{m.group(1)}); "
          f"llama.cpp {LLAMA_CPP_TOK_S[name]}")


def test_check_cpu_counts_sliding_layers_at_the_window():
    """The CPU plan holds the sliding layers' K and V (f32) for the window blocks only: the
    bytes left for KV hold about twice the tokens a cache of every layer for every block
    would (half of gpt-oss's layers slide)."""
    model = REPO / "tests" / "golden" / "models" / "gpt_oss"
    r = run_sparkd("check", "--model", model, "--set", 'engine.backend="cpu"')
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    kv_per_token = 4 * 2 * 2 * 16 * 4  # layers x K,V x kv heads x head_dim x f32
    assert f"f32, {kv_per_token} bytes/token" in out, out
    # Window blocks: 64 sequences x (ceil(7 / 16) + 2) + 8192 / 16 (memory_plan.cpp).
    m = field(r"sliding layers +2 of 4 see the last 8 tokens and hold (\d+) of the (\d+) blocks \(.*; "
              rf"{kv_per_token // 2} of the {kv_per_token} bytes/token\)", out)
    window_blocks, blocks = int(m.group(1)), int(m.group(2))
    assert window_blocks == 64 * 3 + 8192 // 16
    kv = field(r"kv blocks +(\d+) \((\d+) tokens, ([\d.]+) (GiB|MiB)\)", out)
    assert int(kv.group(1)) == blocks and int(kv.group(2)) == blocks * 16
    unit = GIB if kv.group(4) == "GiB" else 1 << 20
    kv_bytes = float(kv.group(3)) * unit
    # The printed bytes are the window blocks in every layer and the rest in half of them.
    want = window_blocks * 16 * kv_per_token + (blocks - window_blocks) * 16 * kv_per_token // 2
    assert abs(kv_bytes - want) <= 0.005 * unit, (kv_bytes, want)
    assert blocks * 16 > 1.9 * kv_bytes / kv_per_token  # tokens those bytes would hold in every layer
