"""Nemotron-H read from llama.cpp's GGUF layout (nemotron_h_moe) on the CPU backend: the tiny
models (tests/golden/models/nemotron_h, "M*EMM-E*-", and nemotron_h_latent, "M*E" with the
LatentMoE) written at test time by tests/gen/gen_nemotron_h_gguf.py as llama.cpp's converter
writes them (per-layer head_count_kv and feed_forward_length, ssm_a = -exp(A_log), squeezed and
reshaped Mamba tensors, Q/K rows interleaved, experts stacked), served and held to
transformers' golden logits of the safetensors models; `sparkd check` describing them as it
describes the safetensors copies; hostile files refused with the key or tensor named.

The oracle is golden.json (transformers, f32): the server's top-20 log-probabilities after
every prefix of every golden sequence against the log-softmax of transformers' logits. The
safetensors model's own test (tests/unit/test_cpu_forward.cpp) bounds the logits' error by
1e-4 of their largest magnitude; a log-probability carries a logit's error and that of the
log-sum-exp, so twice that bounds it here. F16 and Q8_0 copies round the weights (which tips
these tiny models' near-uniform routers), so they are held instead to an F32 copy of the values
they hold, dequantized by the gguf package.
"""
import concurrent.futures
import json
import math
import struct

import pytest
import requests

from conftest import REPO, Server, run_sparkd
from gen_nemotron_h_gguf import write
from test_serve_tiny_models import BASE, char_tokenizer


MODELS = REPO / "tests" / "golden" / "models"
TOP = 20  # the most log-probabilities the API returns
# |log-probability error| / max |logit|: the safetensors test's 1e-4 on logits, twice over.
LIMIT = 2e-4


@pytest.fixture(scope="module")
def gguf_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("nemotron_h_gguf")


def gguf_file(gguf_dir, model, qtype="f32", label="", **changes):
    changed = ".changed" if changes.get("keys") or changes.get("tensors") else ""
    path = gguf_dir / f"{model}.{qtype}{label}{changed}.gguf"
    return write(str(MODELS / model), str(path), qtype, **changes)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """The tiny models' test tokenizer (one CJK character a token id), so that the API's text
    maps back to ids; the GGUF's own byte-level vocabulary would not."""
    d = tmp_path_factory.mktemp("tokenizer")
    eos = json.loads((MODELS / "nemotron_h" / "generation_config.json").read_text())["eos_token_id"]
    (d / "tokenizer.json").write_text(json.dumps(char_tokenizer(eos)))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": chr(BASE + eos)}))
    return d


def golden(model):
    """(sequence, its rows of transformers' log-probabilities, max |logit| over the sequence)."""
    g = json.loads((MODELS / model / "golden.json").read_text())
    vocab = g["vocab_size"]
    out = []
    for seq, logits_file in zip(g["sequences"], g["logits"]):
        raw = (MODELS / model / logits_file).read_bytes()
        values = struct.unpack(f"<{len(raw) // 4}f", raw)
        rows = []
        for pos in range(len(seq)):
            row = values[pos * vocab:(pos + 1) * vocab]
            top = max(row)
            lse = top + math.log(sum(math.exp(v - top) for v in row))
            rows.append([v - lse for v in row])
        out.append((seq, rows, max(abs(v) for v in values)))
    return out


def golden_sequences(model):
    return json.loads((MODELS / model / "golden.json").read_text())["sequences"]


def served_logprobs(path, tokenizer_dir, sequences):
    """Per sequence, per prefix: the server's top-20 {token id: log-probability} for the next
    token (the model's vocabulary one tokenizer_dir character a token id)."""
    s = Server(model=path, settings={"model.tokenizer": str(tokenizer_dir), "model.max_model_len": 256,
                                     "engine.max_num_seqs": 8}).wait_ready()
    try:
        served = requests.get(s.url + "/v1/models", timeout=10).json()["data"][0]["id"]

        def next_token(prompt):
            r = requests.post(s.url + "/v1/completions", timeout=60, json={
                "model": served, "prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": TOP,
                "ignore_eos": True})
            assert r.status_code == 200, r.text
            top = r.json()["choices"][0]["logprobs"]["top_logprobs"][0]
            assert len(top) == TOP and all(len(text) == 1 for text in top), top
            return {ord(text) - BASE: lp for text, lp in top.items()}

        # Eight at a time: the engine batches them, and a request's logits do not depend on
        # its neighbours (test_engine_model's batch invariance).
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            return [list(pool.map(next_token, [seq[:pos + 1] for pos in range(len(seq))])) for seq in sequences]
    finally:
        s.stop()


@pytest.mark.parametrize("model", ["nemotron_h", "nemotron_h_latent"])
def test_f32_gguf_gives_transformers_logits_at_every_prefix(gguf_dir, tokenizer_dir, model):
    got = served_logprobs(gguf_file(gguf_dir, model), tokenizer_dir, golden_sequences(model))
    worst = 0.0
    for (seq, want_rows, scale), got_rows in zip(golden(model), got):
        for pos, (want, top) in enumerate(zip(want_rows, got_rows)):
            # transformers' top 20, up to the error at the 20th (it and the one in its place
            # may each be off by the limit).
            twentieth = sorted(want, reverse=True)[TOP - 1]
            for token, lp in top.items():
                worst = max(worst, abs(lp - want[token]) / scale)
                assert want[token] >= twentieth - 2 * LIMIT * scale, (len(seq), pos, token, "not in the top 20")
    print(f"\n{model} F32 GGUF: max |log-probability error| / max |logit| = {worst:.2e}")
    assert worst < LIMIT


@pytest.mark.parametrize("model", ["nemotron_h", "nemotron_h_latent"])
@pytest.mark.parametrize("qtype", ["f16", "q8_0"])
def test_packed_gguf_computes_what_its_values_do(gguf_dir, tokenizer_dir, model, qtype):
    """An F16 or Q8_0 file (the matrices packed, as llama.cpp's converter and llama-quantize
    write them) against an F32 file of the values it holds, dequantized by the gguf package:
    the F32 path is held to transformers above, so the packed one reads its blocks right if
    they agree. (Against transformers' logits themselves the rounding tips these tiny models'
    near-uniform routers.)"""
    packed = served_logprobs(gguf_file(gguf_dir, model, qtype), tokenizer_dir, golden_sequences(model))
    values = served_logprobs(gguf_file(gguf_dir, model, qtype, ".values", values_only=True), tokenizer_dir,
                             golden_sequences(model))
    worst = 0.0
    for (_, _, scale), p_rows, v_rows in zip(golden(model), packed, values):
        for p, v in zip(p_rows, v_rows):
            common = set(p) & set(v)  # all 20 but for a near-tie at the 20th
            assert len(common) >= TOP - 1, (p, v)
            worst = max([worst] + [abs(p[t] - v[t]) / scale for t in common])
    print(f"\n{model} {qtype} GGUF against its values in F32: "
          f"max |log-probability difference| / max |logit| = {worst:.2e}")
    assert worst < LIMIT


# The model's description lines of `sparkd check` (the memory plan differs: the GGUF says
# context_length 2^20, as llama.cpp's converter writes for models without RoPE).
MODEL_LINES = ("layers", "attention", "blocks", "mamba-2", "rope", "experts", "vocab", "special tokens", "parameters")


def described(path):
    r = run_sparkd("check", "--model", path, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return [line for line in r.stdout.splitlines() if line.strip().split("  ")[0] in MODEL_LINES]


@pytest.mark.parametrize("model", ["nemotron_h", "nemotron_h_latent"])
def test_check_describes_the_gguf_as_the_safetensors_copy(gguf_dir, model):
    got, want = described(gguf_file(gguf_dir, model)), described(MODELS / model)
    assert len(want) == len(MODEL_LINES), want
    assert got == want


def refuses(path, *fields):
    """`sparkd check` stops at the input (exit 2, no crash) naming every field."""
    r = run_sparkd("check", "--model", path, timeout=30)
    assert r.returncode == 2, r.stdout + r.stderr
    for f in fields:
        assert f in r.stderr, f"{f!r} not named in: {r.stderr}"
    for crash in ("Aborted", "terminate", "Segmentation", "AddressSanitizer"):
        assert crash not in r.stderr, r.stderr
    return r.stderr


ARCH = "nemotron_h_moe."
KV = [0, 2, 0, 0, 0, 0, 0, 2, 0]  # "M*EMM-E*-"
FF = [0, 0, 64, 0, 0, 64, 64, 0, 64]
HOSTILE = {
    "head_count_kv one short": (
        {"keys": {"attention.head_count_kv": KV[:-1]}},
        [ARCH + "attention.head_count_kv", "8 entries", "block_count is 9"]),
    "feed_forward_length one long": (
        {"keys": {"feed_forward_length": FF + [0]}},
        [ARCH + "feed_forward_length", "10 entries", "block_count is 9"]),
    "a layer both attention and feed-forward": (
        {"keys": {"feed_forward_length": [0, 64] + FF[2:]}},
        [ARCH + "attention.head_count_kv", "feed_forward_length", "layer 1"]),
    "attention layers of different KV heads": (
        {"keys": {"attention.head_count_kv": [0, 2, 0, 0, 0, 0, 0, 4, 0]}},
        [ARCH + "attention.head_count_kv", "2 at layer 1", "4 at layer 7"]),
    "ssm groups not dividing the heads": (
        {"keys": {"ssm.group_count": 3}}, [ARCH + "ssm.group_count", "= 3", "ssm.time_step_rank = 8"]),
    "ssm inner size not whole heads": (
        {"keys": {"ssm.inner_size": 100}}, [ARCH + "ssm.inner_size", "= 100", "ssm.time_step_rank = 8"]),
    "ssm key missing": (
        {"keys": {"ssm.state_size": None}}, [ARCH + "ssm.state_size", "is missing"]),
    # 2 x 128 (z, x) + 2 groups x 2 x 8 (B, C) + 8 (dt) = 296 rows where the file has 328.
    "ssm state size disagreeing with in_proj": (
        {"keys": {"ssm.state_size": 8}},
        ["wrong shapes", "model.layers.0.mixer.in_proj.weight", "[328, 32]", "[296, 32]"]),
    "a Mamba tensor missing": (
        {"tensors": {"blk.4.ssm_out.weight": lambda a: None}},
        ["missing tensors", "model.layers.4.mixer.out_proj.weight"]),
    "an MoE layer without its router": (
        {"tensors": {"blk.2.ffn_gate_inp.weight": lambda a: None}},
        ["missing tensors", "model.layers.2.mlp.gate.weight"]),
    "the grouped norm in the wrong groups": (
        {"tensors": {"blk.3.ssm_norm.weight": lambda a: a.reshape(4, 32)}},
        ["wrong shapes", "model.layers.3.mixer.norm.weight", "[4, 32]", "[128]"]),
    "group-limited routing": (
        {"keys": {"expert_group_count": 2}}, [ARCH + "expert_group_count", "not supported"]),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_check_refuses_a_hostile_gguf(gguf_dir, case):
    changes, fields = HOSTILE[case]
    refuses(gguf_file(gguf_dir, "nemotron_h", **changes), "GGUF file", *fields)


def test_a_positive_ssm_a_is_refused_when_loaded(gguf_dir):
    """llama.cpp stores A = -exp(A_log): a value that is not negative has no A_log."""
    path = gguf_file(gguf_dir, "nemotron_h", tensors={"blk.3.ssm_a": lambda a: -a})
    r = run_sparkd("generate", "--model", path, "--prompt", "hi", "--max-tokens", "1", timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "model.layers.3.mixer.A_log" in r.stderr and "must be negative" in r.stderr, r.stderr


def test_an_mtp_block_after_the_layers_is_left_out(gguf_dir):
    """llama.cpp counts Nemotron-3-Super's MTP block in block_count, nextn_predict_layers of
    them after the model's layers, each attending and feeding forward at once: the model is
    the layers before it, whatever the arrays say of the MTP block."""
    path = gguf_file(gguf_dir, "nemotron_h", keys={"block_count": 10, "nextn_predict_layers": 1,
                                                   "attention.head_count_kv": KV + [2],
                                                   "feed_forward_length": FF + [64]})
    assert described(path) == described(MODELS / "nemotron_h")
