"""Nemotron-H / Nemotron-3 (NemotronHForCausalLM) on the CPU backend: hostile model folders
refused by `sparkd check` with the problem named, transformers 5's layers_block_type read as
the pattern string, the Nemotron-3-Nano-30B-A3B plan for a Spark counted again here from its
config alone, and the tiny model over the chat API.

Only the chat request is marked cuda_path: the CUDA backend's Nemotron-H path is checked
against the CPU backend by tests/gpu/check_model.cu (the tiny models, FP16, on the emulator
too).

The hostile folders are copies of tests/golden/models/nemotron_h (f32, pattern "M*EMM-E*-",
8 Mamba heads x 16, 2 groups, state 16, so in_proj has 2 x 128 + 2 x 2 x 16 + 8 = 328 rows)
with one thing changed.
"""
import json
import re
import shutil

import numpy as np
import openai
import pytest
from safetensors.numpy import load_file, save_file

from conftest import REPO, Server, run_sparkd
from test_serve_tiny_models import BASE, served_copy


TINY = REPO / "tests" / "golden" / "models" / "nemotron_h"
NANO = REPO / "tests" / "golden" / "configs" / "nemotron_3_nano_30b_a3b"
GIB, MIB = 1 << 30, 1 << 20
SPARK_GB_S = 218  # the gb10 preset's copy rate
# vLLM's measured batch-1 decode of Nemotron-3-Nano-30B-A3B on one DGX Spark.
VLLM_TOK_S = {"NVFP4": 74.75, "FP8": 47.6}
SUPER = REPO / "tests" / "golden" / "configs" / "nemotron_3_super_120b_a12b"
# vLLM's measured batch-1 decode of Nemotron-3-Super-120B-A12B on one DGX Spark.
VLLM_SUPER_TOK_S = {"NVFP4": 16.3}
# nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16: every parameter its safetensors headers hold.
SUPER_RELEASE_PARAMETERS = 123_611_033_088
# transformers 5's names for the pattern's letters.
BLOCK_TYPES = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def hostile_copy(tmp_path, config=None, tensors=None):
    """A copy of the tiny model with its config.json (a dict edited in place) and/or its
    model.safetensors (likewise) changed."""
    d = tmp_path / "model"
    shutil.copytree(TINY, d)
    if config:
        c = json.loads((d / "config.json").read_text())  # the bare Infinity reads as inf
        config(c)
        (d / "config.json").write_text(json.dumps(c))
    if tensors:
        t = load_file(d / "model.safetensors")
        tensors(t)
        save_file(t, d / "model.safetensors")
    return d


def refuses(path, *fields):
    """`sparkd check` stops at the input (exit 2, no crash, no plan) naming every field."""
    r = run_sparkd("check", "--model", path, timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    for f in fields:
        assert f in r.stderr, f"{f!r} not named in: {r.stderr}"
    for crash in ("Aborted", "terminate", "Segmentation", "AddressSanitizer"):
        assert crash not in r.stderr, r.stderr
    assert "memory plan" not in r.stdout and "weights" not in r.stdout, r.stdout  # stopped before planning
    return r.stderr


def set_key(key, value):
    return lambda c: c.__setitem__(key, value)


def drop_tensor(name):
    return lambda t: t.pop(name)


def reshape_tensor(name, shape):
    return lambda t: t.__setitem__(name, np.zeros(shape, np.float32))


def pattern_as_list(c, names=BLOCK_TYPES):
    c["layers_block_type"] = [names[ch] for ch in c.pop("hybrid_override_pattern")]


HOSTILE = {
    "pattern shorter than num_hidden_layers": (
        set_key("hybrid_override_pattern", "M*EMM-E*"),
        ["hybrid_override_pattern", "8 blocks", "num_hidden_layers is 9"]),
    "pattern longer than num_hidden_layers": (
        set_key("hybrid_override_pattern", "M*EMM-E*-M"),
        ["hybrid_override_pattern", "10 blocks", "num_hidden_layers is 9"]),
    "unknown letter in the pattern": (
        set_key("hybrid_override_pattern", "M*EMX-E*-"), ["hybrid_override_pattern", "'X' at layer 4"]),
    "unknown block type in layers_block_type": (
        lambda c: (pattern_as_list(c), c["layers_block_type"].__setitem__(3, "convolution")),
        ["layers_block_type", "convolution"]),
    "mamba_num_heads not a multiple of n_groups": (
        set_key("n_groups", 3), ["n_groups", "= 3", "mamba_num_heads = 8"]),
    "group-limited routing": (
        set_key("n_group", 2), ["n_group", "not supported"]),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_check_refuses_a_hostile_config(tmp_path, case):
    edit, fields = HOSTILE[case]
    refuses(hostile_copy(tmp_path, config=edit), "config.json", *fields)


def test_check_refuses_in_proj_rows_that_disagree_with_heads_groups_and_state(tmp_path):
    # 8 rows short of the 2 x 128 (z, x) + 2 x 2 x 16 (B, C) + 8 (dt) = 328 the config makes.
    d = hostile_copy(tmp_path, tensors=reshape_tensor("backbone.layers.3.mixer.in_proj.weight", (320, 32)))
    refuses(d, "wrong shapes", "layers.3.mixer.in_proj.weight", "[320, 32]", "[328, 32]")


def test_check_names_the_mamba_fields_that_shape_in_proj(tmp_path):
    d = hostile_copy(tmp_path, tensors=reshape_tensor("backbone.layers.3.mixer.in_proj.weight", (320, 32)))
    message = refuses(d, "in_proj")
    assert "linear_num_key_heads" not in message
    for f in ("mamba_num_heads", "n_groups", "ssm_state_size"):
        assert f in message


def test_check_refuses_a_latent_moe_config_without_its_latent_projections(tmp_path):
    # Nemotron-3-Super's LatentMoE (moe_latent_size) over a checkpoint that has none: the
    # projections are missing and the experts have the hidden width, not the latent one.
    d = hostile_copy(tmp_path, config=set_key("moe_latent_size", 16))
    refuses(d, "missing tensors", "fc1_latent_proj", "wrong shapes", "[64, 32]", "[64, 16]")


def test_check_refuses_a_missing_tensor(tmp_path):
    d = hostile_copy(tmp_path, tensors=drop_tensor("backbone.layers.4.mixer.out_proj.weight"))
    refuses(d, "missing tensors", "layers.4.mixer.out_proj.weight")


def plan_lines(path):
    """`sparkd check --device gb10` (a fixed budget, so the plan does not follow this
    machine's free memory) without the lines that name the folder."""
    r = run_sparkd("check", "--model", path, "--device", "gb10", timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return [line for line in r.stdout.splitlines() if str(path) not in line]


def test_layers_block_type_loads_as_the_pattern_string(tmp_path):
    """transformers 5 writes the blocks as a list of names; the same model, every line of
    the plan (weights read and checked, parameters, state, KV) the same."""
    d = hostile_copy(tmp_path, config=pattern_as_list)
    assert "hybrid_override_pattern" not in json.loads((d / "config.json").read_text())
    got, want = plan_lines(d), plan_lines(TINY)
    assert got == want
    assert any("M*EMM-E*-" in line for line in got), got


# The Nemotron-3-Nano-30B-A3B plan, counted from its config.


def nano_config():
    c = json.loads((NANO / "config.json").read_text())
    assert c["hybrid_override_pattern"].count("M") == 23 and c["hybrid_override_pattern"].count("*") == 6
    return c


def mamba_shapes(c):
    inner = c["mamba_num_heads"] * c["mamba_head_dim"]
    conv_dim = inner + 2 * c["n_groups"] * c["ssm_state_size"]
    in_proj = inner + conv_dim + c["mamba_num_heads"]  # z, then x B C (the conv's channels), then dt
    return inner, conv_dim, in_proj


def parameter_count(c):
    """Embeddings, the blocks' own tensors, the final norm and the LM head."""
    H, V = c["hidden_size"], c["vocab_size"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    heads, K = c["mamba_num_heads"], c["conv_kernel"]
    E, mi, si, I = (c["n_routed_experts"], c["moe_intermediate_size"], c["moe_shared_expert_intermediate_size"],
                    c["intermediate_size"])
    L = c.get("moe_latent_size") or H  # LatentMoE: the experts work at this width
    latent = 2 * H * L if c.get("moe_latent_size") else 0  # fc1_latent_proj, fc2_latent_proj
    inner, conv_dim, in_proj = mamba_shapes(c)
    per_block = {
        # in_proj, out_proj, conv1d weight and bias, A_log, D, dt_bias, the gated norm
        "M": in_proj * H + H * inner + conv_dim * K + conv_dim + 3 * heads + inner,
        "*": (nh + 2 * nkv) * hd * H + H * nh * hd,  # q k v, o
        "-": 2 * I * H,  # up, down
        # router, its correction bias, experts, shared expert (on the hidden state), latent projections
        "E": E * H + E + E * 2 * mi * L + 2 * si * H + latent,
    }
    n = sum(H + per_block[ch] for ch in c["hybrid_override_pattern"])  # each block's norm
    return n + V * H + H + (0 if c.get("tie_word_embeddings") else V * H)


def device_bytes(c, q8_0=False):
    """(all bytes, bytes a batch-1 decode step reads) as the CUDA backend's DeviceWeights lays
    the weights out (device_weights.cu): every piece 256-byte aligned; matrices in BF16 (with
    q8_0, one byte a value and then an f16 scale per 32), the router and vectors in f32; a
    decode step reads top_k / n_routed_experts of each expert stack and no embedding row
    beyond its own."""
    H, V = c["hidden_size"], c["vocab_size"]
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    heads, K = c["mamba_num_heads"], c["conv_kernel"]
    E, k, mi, si, I = (c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"],
                       c["moe_shared_expert_intermediate_size"], c["intermediate_size"])
    L = c.get("moe_latent_size") or H
    inner, conv_dim, in_proj = mamba_shapes(c)

    def align(n):
        return (n + 255) // 256 * 256

    def matrix(rows, cols, quantized=q8_0):
        return align(rows * cols) + align(rows * cols // 32 * 2) if quantized else align(rows * cols * 2)

    def f32(n):
        return align(n * 4)

    total = read = 0

    def add(nbytes, share=1.0):
        nonlocal total, read
        total += nbytes
        read += nbytes * share

    add(matrix(V, H), 0)  # the embedding: one row a token
    for ch in c["hybrid_override_pattern"]:
        add(f32(H))  # the block's norm
        if ch == "M":
            add(matrix(in_proj, H) + matrix(H, inner) + f32(conv_dim * K) + f32(conv_dim) + 3 * f32(heads) + f32(inner))
        elif ch == "*":
            add(matrix((nh + 2 * nkv) * hd, H) + matrix(H, nh * hd))
        elif ch == "-":
            add(matrix(I, H) + matrix(H, I))
        else:
            add(f32(E * H) + f32(E))  # the router and its score-correction bias
            add(matrix(E * mi, L) + matrix(E * L, mi), k / E)  # the experts' up and down stacks
            if c.get("moe_latent_size"):
                add(matrix(L, H) + matrix(H, L))  # to the latent width and back
            add(matrix(si, H) + matrix(H, si))  # the shared expert
    add(f32(H) + matrix(V, H))  # final norm, LM head
    return total, read


def state_bytes_per_sequence(c):
    """Per Mamba layer, the conv's last (kernel - 1) inputs and a head_dim x state matrix per
    head, f32."""
    _, conv_dim, _ = mamba_shapes(c)
    per_layer = (c["conv_kernel"] - 1) * conv_dim + c["mamba_num_heads"] * c["mamba_head_dim"] * c["ssm_state_size"]
    return c["hybrid_override_pattern"].count("M") * per_layer * 4


def field(pattern, text):
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in:\n{text}"
    return m


def check_nano(*settings):
    args = ["check", "--model", NANO, "--set", 'model.load_format="dummy"', "--device", "gb10"]
    for s in settings:
        args += ["--set", s]
    r = run_sparkd(*args, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def decode_line(out, label=r"decode \(proj\.\)"):
    m = field(label + r" +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token", out)
    return int(m.group(1)), float(m.group(2))


def test_check_device_gb10_plans_nemotron_3_nano_30b_a3b():
    c = nano_config()
    out = check_nano()
    assert "MEMEM*EMEMEM*" in out and "23 of 52 layers; 64 heads x 64, 8 groups, state 128, conv kernel 4" in out

    params = parameter_count(c)
    m = field(r"parameters +([\d.]+) B \((\d+)\)", out)
    assert int(m.group(2)) == params and m.group(1) == "31.578", (m.group(0), params)

    # The checkpoint holds every tensor in BF16; the device adds f32 vectors, the f32 router
    # and alignment.
    total, read = device_bytes(c)
    weights = field(r"weights +([\d.]+) GiB on the device \(the file's tensors: ([\d.]+) GiB; ([\d.]+)x\)", out)
    assert abs(float(weights.group(1)) - total / GIB) < 0.006, (weights.group(0), total / GIB)
    assert abs(float(weights.group(2)) - params * 2 / GIB) < 0.006, (weights.group(0), params * 2 / GIB)
    assert 1.0 < total / (params * 2) < 1.002
    assert abs(float(field(r"read per token +([\d.]+) GiB", out).group(1)) - read / GIB) < 0.006

    state = state_bytes_per_sequence(c)
    assert state == 23 * (3 * 6144 + 64 * 64 * 128) * 4 == 49930240
    m = field(r"recurrent state +([\d.]+) MiB per sequence x (\d+) .* = ([\d.]+) GiB, beside the KV cache", out)
    assert m.group(1) == f"{state / MIB:.1f}", (m.group(0), state)
    assert abs(float(m.group(3)) - state * int(m.group(2)) / GIB) < 0.006, m.group(0)

    kv_per_token = 6 * 2 * c["num_key_value_heads"] * c["head_dim"] * 2  # the attention layers' K and V, BF16
    assert kv_per_token == 6144
    assert f"kv cache dtype   bf16, {kv_per_token} bytes/token" in out, out

    # A decode step reads its weights, and each Mamba layer's state and writes it back.
    per_token = read + 2 * state
    rate, read_gib = decode_line(out)
    assert "(the weights, and the recurrent state read and written)" in out
    assert abs(read_gib * GIB / per_token - 1) < 0.02, (read_gib, per_token / GIB)
    assert abs(rate / (SPARK_GB_S * 1e9 / per_token) - 1) < 0.02 and abs(rate - SPARK_GB_S * 1e9 / per_token) <= 1
    print(f"\nNemotron-3-Nano-30B-A3B BF16 on gb10: {total / GIB:.2f} GiB of weights, {params / 1e9:.2f} B parameters, "
          f"{state} B of state a sequence, {kv_per_token} B of KV a token, {read_gib} GiB read a token: "
          f"~{rate} tok/s projected (counted here: {SPARK_GB_S * 1e9 / per_token:.1f}); "
          f"vLLM measured {VLLM_TOK_S['NVFP4']} (NVFP4), {VLLM_TOK_S['FP8']} (FP8)")


def test_check_device_gb10_plans_nemotron_3_nano_quantized_to_q8_0_at_load():
    """[model] quantize = "q8_0": every matrix (the Mamba projections, attention, experts,
    shared expert, LM head and embedding) in Q8_0, the router and vectors still f32; the
    plan shows the rate as stored beside it."""
    c = nano_config()
    out = check_nano('model.quantize="q8_0"')
    # 23 MoE layers x 128 experts x (up, down), 23 shared experts x 2, 6 attention layers x
    # (q, k, v, o), 23 Mamba layers x (in_proj, out_proj), the LM head and the embedding.
    assert f"at load: BF16 x{23 * 128 * 2 + 23 * 2 + 6 * 4 + 23 * 2 + 2}" in out, out
    total, read = device_bytes(c, q8_0=True)
    stored_total, stored_read = device_bytes(c)
    state = state_bytes_per_sequence(c)
    assert abs(float(field(r"weights +([\d.]+) GiB on the device", out).group(1)) - total / GIB) < 0.006
    rate, read_gib = decode_line(out)
    assert abs(read_gib * GIB / (read + 2 * state) - 1) < 0.02, (read_gib, (read + 2 * state) / GIB)
    assert abs(rate - SPARK_GB_S * 1e9 / (read + 2 * state)) <= 1, rate
    m = field(r"as stored +~(\d+) tokens/s at batch 1: ([\d.]+) GiB read a token, ([\d.]+) GiB of weights", out)
    stored_rate, stored_read_gib = int(m.group(1)), float(m.group(2))
    assert abs(stored_read_gib * GIB / (stored_read + 2 * state) - 1) < 0.02
    assert abs(stored_rate - SPARK_GB_S * 1e9 / (stored_read + 2 * state)) <= 1
    assert abs(float(m.group(3)) - stored_total / GIB) < 0.006
    print(f"\nNemotron-3-Nano-30B-A3B Q8_0 on gb10: {total / GIB:.2f} GiB, {read_gib} GiB read a token: ~{rate} tok/s "
          f"projected; as stored (BF16) ~{stored_rate} tok/s, {stored_read_gib} GiB a token; "
          f"vLLM measured {VLLM_TOK_S['NVFP4']} (NVFP4), {VLLM_TOK_S['FP8']} (FP8)")


# The Nemotron-3-Super-120B-A12B plan, counted from its config (the BF16 release's, its
# LatentMoE and one MTP layer pair among the keys; see the folder's README).


def super_config():
    c = json.loads((SUPER / "config.json").read_text())
    p = c["hybrid_override_pattern"]
    assert (len(p), p.count("M"), p.count("E"), p.count("*")) == (88, 40, 40, 8)
    return c


def mtp_parameter_count(c):
    """The MTP layers the model does not read (num_nextn_predict_layers, mtp_hybrid_override_pattern
    "*E"; the head reads them with speculative = "mtp"): eh_proj (the embedding and the hidden state, concatenated, to hidden), enorm, hnorm,
    each block with its norm, and the final norm."""
    assert c["num_nextn_predict_layers"] == 1 and c["mtp_hybrid_override_pattern"] == "*E"
    H = c["hidden_size"]
    blocks = dict(c, hybrid_override_pattern=c["mtp_hybrid_override_pattern"], vocab_size=0, tie_word_embeddings=True)
    return 2 * H * H + 2 * H + parameter_count(blocks)  # counted as blocks: their norms and the final norm


def check_super(*settings):
    """`sparkd check --device gb10` on the Super's config with dummy weights: (exit code, stdout)."""
    args = ["check", "--model", SUPER, "--set", 'model.load_format="dummy"', "--device", "gb10"]
    for s in settings:
        args += ["--set", s]
    r = run_sparkd(*args, timeout=30)
    for crash in ("Aborted", "terminate", "Segmentation", "AddressSanitizer"):
        assert crash not in r.stderr, r.stderr
    return r.returncode, r.stdout


def test_check_device_gb10_plans_nemotron_3_super_120b_a12b():
    """The plan in full; 225 GiB of BF16 weights do not fit one Spark, so the check ends with
    "does not fit" (exit 2) after printing it, and quantized to Q8_0 at load (120 GiB) still
    does not: the projections are what a single box would do with those bytes."""
    c = super_config()
    rc, out = check_super()
    assert rc == 2 and out.rstrip().endswith("does not fit"), out
    assert "MEMEMEM*EMEMEMEM*" in out and "40 of 88 layers; 128 heads x 64, 8 groups, state 128, conv kernel 4" in out
    assert "experts          512, top 22, moe_intermediate 2688" in out and "latent 1024" in out, out

    # The BF16 release's safetensors hold 123,611,033,088 parameters (BF16, and the 41 MoE
    # layers' F32 score-correction biases), its MTP layers among them; sparkd reads all but those.
    params = parameter_count(c)
    assert params + mtp_parameter_count(c) == SUPER_RELEASE_PARAMETERS
    m = field(r"parameters +([\d.]+) B \((\d+)\)", out)
    assert int(m.group(2)) == params and m.group(1) == "120.669", (m.group(0), params)

    total, read = device_bytes(c)
    weights = field(r"weights +([\d.]+) GiB on the device \(the file's tensors: ([\d.]+) GiB; ([\d.]+)x\)", out)
    assert abs(float(weights.group(1)) - total / GIB) < 0.006, (weights.group(0), total / GIB)
    assert abs(float(weights.group(2)) - params * 2 / GIB) < 0.006, (weights.group(0), params * 2 / GIB)
    assert abs(float(field(r"read per token +([\d.]+) GiB", out).group(1)) - read / GIB) < 0.006

    state = state_bytes_per_sequence(c)
    assert state == 40 * (3 * 10240 + 128 * 64 * 128) * 4 == 172687360
    m = field(r"recurrent state +([\d.]+) MiB per sequence x (\d+) .* = ([\d.]+) GiB, beside the KV cache", out)
    assert m.group(1) == f"{state / MIB:.1f}", (m.group(0), state)

    kv_per_token = 8 * 2 * c["num_key_value_heads"] * c["head_dim"] * 2  # 8 attention layers' K and V, BF16
    assert kv_per_token == 8192
    assert f"kv cache dtype   bf16, {kv_per_token} bytes/token" in out, out
    assert "fits             NO: the model does not fit" in out and "weights 224.92 GiB" in out, out

    rate, read_gib = decode_line(out)
    per_token = read + 2 * state
    assert abs(read_gib * GIB / per_token - 1) < 0.02, (read_gib, per_token / GIB)
    assert abs(rate - SPARK_GB_S * 1e9 / per_token) <= 1, rate

    rc, q8 = check_super('model.quantize="q8_0"')
    assert rc == 2 and q8.rstrip().endswith("does not fit"), q8
    # 40 MoE layers x 512 experts x (up, down), 40 shared experts x 2, 40 latent projections x
    # 2 (in "experts"), 8 attention layers x (q, k, v, o), 40 Mamba layers x (in_proj,
    # out_proj), the LM head and the embedding.
    assert f"at load: BF16 x{40 * 512 * 2 + 40 * 2 + 40 * 2 + 8 * 4 + 40 * 2 + 2}" in q8, q8
    q8_total, q8_read = device_bytes(c, q8_0=True)
    assert abs(float(field(r"weights +([\d.]+) GiB on the device", q8).group(1)) - q8_total / GIB) < 0.006
    q8_rate, q8_read_gib = decode_line(q8)
    assert abs(q8_read_gib * GIB / (q8_read + 2 * state) - 1) < 0.02, (q8_read_gib, (q8_read + 2 * state) / GIB)
    assert abs(q8_rate - SPARK_GB_S * 1e9 / (q8_read + 2 * state)) <= 1, q8_rate
    print(f"\nNemotron-3-Super-120B-A12B on gb10: {params / 1e9:.2f} B parameters (+ {mtp_parameter_count(c) / 1e9:.2f} B "
          f"of the MTP head's), {state} B of state a sequence, {kv_per_token} B of KV a token; BF16: "
          f"{total / GIB:.2f} GiB of weights, {read_gib} GiB read a token, ~{rate} tok/s projected; Q8_0 at load: "
          f"{q8_total / GIB:.2f} GiB, {q8_read_gib} GiB a token, ~{q8_rate} tok/s projected (neither fits one box); "
          f"vLLM measured {VLLM_SUPER_TOK_S['NVFP4']} (NVFP4)")


def test_check_device_gb10_counts_nemotron_3_super_mtp_head():
    """speculative = "mtp": the plan adds the MTP head (eh_proj, its attention and LatentMoE
    blocks, their norms, and its copy of the model's embedding and LM head) and its one
    attention block's K and V in every block."""
    c = super_config()
    rc, out = check_super('engine.speculative="mtp"')
    assert rc == 2 and out.rstrip().endswith("does not fit"), out
    m = field(r"draft model +([\d.]+) GiB weights, ([\d.]+) GiB workspace, (\d+) bytes/token of K and V", out)
    H, V = c["hidden_size"], c["vocab_size"]
    head = (mtp_parameter_count(c) + 2 * V * H) * 2  # BF16
    assert abs(float(m.group(1)) - head / GIB) < 0.006, (m.group(0), head / GIB)
    assert int(m.group(3)) == 2 * c["num_key_value_heads"] * c["head_dim"] * 2 == 1024
    print(f"\nNemotron-3-Super-120B-A12B's MTP head on gb10: {m.group(1)} GiB of BF16 weights "
          f"({mtp_parameter_count(c) / 1e9:.2f} B parameters of its own), {m.group(3)} B of K and V a token")


@pytest.mark.cuda_path
def test_tiny_nemotron_h_over_the_chat_api(tmp_path):
    """One chat request to the served tiny model: text back, usage counted (on the emulated
    CUDA server too: its Mamba-2, attention without RoPE, squared-ReLU and sigmoid-routed MoE
    blocks end to end)."""
    s = Server(model=served_copy("nemotron_h", tmp_path), settings={
        "model.max_model_len": 256, "engine.max_num_seqs": 4}).wait_ready()
    try:
        # Closed before the server stops: no idle keep-alive connection left for its drain to wait out.
        with openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
            prompt = "".join(chr(BASE + i) for i in (5, 17, 99, 200, 31, 64, 128, 7))
            chat = client.chat.completions.create(model="nemotron_h", messages=[{"role": "user", "content": prompt}],
                                                  max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
            # No decoder in the test tokenizer: the tokens' characters are joined by spaces.
            ids = [ord(ch) - BASE for ch in chat.choices[0].message.content.split(" ")]
            assert ids and all(0 <= i < 256 for i in ids), chat.choices[0].message.content
            assert chat.choices[0].finish_reason == "length"
            assert chat.usage.prompt_tokens == len(prompt)
            assert chat.usage.completion_tokens == 6
            assert chat.usage.total_tokens == len(prompt) + 6
    finally:
        s.stop()
