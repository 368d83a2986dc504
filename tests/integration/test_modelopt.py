"""NVIDIA ModelOpt checkpoints (quant_method "modelopt": NVFP4, W4A16_NVFP4, FP8 per tensor,
MIXED_PRECISION) and llama.cpp's GGUF type NVFP4, served by sparkd and held to an independent
reference. The tiny models are written at test time by tests/gen/gen_modelopt_models.py (its
own quantizer and packers; the GGUF blocks checked there against the gguf package's NVFP4
decoder), nothing binary committed.

The oracle is numpy_llama's float64 forward pass (checked here first against transformers'
logits of the tiny f32 fixtures) over the dequantized weights the files hold: the server's
top-20 log-probabilities after every prefix of every sequence against the log-softmax of those
logits, |error| / max |logit| under 2e-4, as tests/integration/test_nemotron_h_gguf.py holds
its GGUF models. Hostile files are refused by `sparkd check` with the tensor or key named.
"""
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, check_refuses, run_sparkd
from test_nemotron_h_gguf import LIMIT, TOP, served_logprobs
from test_serve_tiny_models import BASE, char_tokenizer

import gen_modelopt_models as gen  # tests/gen, on the path through conftest
import numpy_llama

MODELS = REPO / "tests" / "golden" / "models"


@pytest.fixture(scope="module")
def reference_checked():
    """numpy_llama against transformers' golden logits of the tiny f32 Llama, Qwen3 and
    Qwen3-MoE, once: the reference below rests on transformers, not on sparkd."""
    numpy_llama.check_against_transformers(tuple(str(MODELS / m) for m in ("llama", "qwen3", "qwen3_moe")))
    gen.self_check()


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("modelopt")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """One CJK character a token id, so the API's text maps back to ids (the GGUF's own
    vocabulary would not)."""
    d = tmp_path_factory.mktemp("tokenizer")
    eos = gen.LLAMA["eos_token_id"]
    (d / "tokenizer.json").write_text(json.dumps(char_tokenizer(eos)))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": chr(BASE + eos)}))
    return d


def model(out_dir, kind, label="", **hostile):
    """Writes layout `kind` (with the hostile changes) under out_dir: (path, config, weights)."""
    name = kind.replace(".gguf", "") + label
    if kind.endswith(".gguf"):
        folder = out_dir / name
        c, w = gen.write(kind, str(folder), **hostile)
        return folder / kind, c, w
    c, w = gen.write(kind, str(out_dir / name), **hostile)
    return out_dir / name, c, w


def reference(c, w):
    """Per sequence: (sequence, rows of log-probabilities per prefix, max |logit|)."""
    out = []
    for seq in gen.sequences(c):
        logits = numpy_llama.forward(w, c, seq)
        top = logits.max(axis=-1, keepdims=True)
        lp = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
        out.append((seq, lp, float(np.abs(logits).max())))
    return out


# id -> (layout, write's keyword arguments)
SERVED = {
    "llama_nvfp4": ("llama_nvfp4", {}),
    "llama_w4a16": ("llama_w4a16", {}),
    "llama_fp8": ("llama_fp8", {}),
    "qwen3_moe_mixed": ("qwen3_moe_mixed", {}),
    "qwen3_moe_nvfp4": ("qwen3_moe_nvfp4", {}),
    "llama_nvfp4.gguf": ("llama_nvfp4.gguf", {}),
    # Some exporters write the per-tensor scale as [1] rather than a scalar.
    "llama_nvfp4 weight_scale_2 [1]": ("llama_nvfp4", {"scale2_shape": [1]}),
}


@pytest.mark.parametrize("case", list(SERVED))
def test_served_logprobs_are_the_dequantized_weights_logprobs(reference_checked, out_dir, tokenizer_dir, case):
    kind, variant = SERVED[case]
    path, c, w = model(out_dir, kind, label="_scale2_1" if variant else "", **variant)
    want = reference(c, w)
    got = served_logprobs(path, tokenizer_dir, [seq for seq, _, _ in want])
    worst, where = 0.0, None
    for (seq, want_rows, scale), got_rows in zip(want, got):
        for pos, (row, top) in enumerate(zip(want_rows, got_rows)):
            # The reference's top 20, up to the error at the 20th (it and the one in its place
            # may each be off by the limit).
            twentieth = np.sort(row)[::-1][TOP - 1]
            for token, lp in top.items():
                err = abs(lp - row[token]) / scale
                if err > worst:
                    worst, where = err, (len(seq), pos, token)
                assert row[token] >= twentieth - 2 * LIMIT * scale, (len(seq), pos, token, "not in the top 20")
    print(f"\n{case}: max |log-probability error| / max |logit| = {worst:.2e} at (length, position, token) {where}")
    assert worst < LIMIT


# id -> (layout, write's keyword arguments, strings `sparkd check` must name): what the
# tensor table shows, refused before anything loads.
HOSTILE = {
    "weight_scale of half the blocks": ("llama_nvfp4", {"scale_shape": "model.layers.0.self_attn.k_proj"},
                                        ["model.layers.0.self_attn.k_proj.weight_scale", "shape"]),
    "quantized_layers names a layer without tensors": (
        "qwen3_moe_mixed", {"extra_layer": "model.layers.7.self_attn.q_proj"},
        ["model.layers.7.self_attn.q_proj", "quantized_layers"]),
    "unsupported quant_algo": ("llama_nvfp4", {"quant_algo": "W4A8_AWQ"}, ["W4A8_AWQ"]),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_check_refuses_a_hostile_checkpoint(out_dir, case):
    kind, changes, fields = HOSTILE[case]
    path, _, _ = model(out_dir, kind, label="_" + "_".join(case.split()), **changes)
    check_refuses(path, *fields)


# id -> (layout, write's keyword arguments, strings the load must name): what is in the
# data, which `sparkd check` does not read; the load refuses it before any backend exists.
HOSTILE_DATA = {
    "weight_scale NaN": ("llama_nvfp4", {"nan_scale": "model.layers.1.mlp.down_proj"},
                         ["model.layers.1.mlp.down_proj.weight_scale", "NaN", "element"]),
    "input_scale zero": ("llama_nvfp4", {"input_scale_zero": "model.layers.0.mlp.up_proj"},
                         ["model.layers.0.mlp.up_proj.input_scale", "positive"]),
}


@pytest.mark.parametrize("case", list(HOSTILE_DATA))
def test_load_refuses_a_hostile_scale(out_dir, tokenizer_dir, case):
    kind, changes, fields = HOSTILE_DATA[case]
    path, _, _ = model(out_dir, kind, label="_" + "_".join(case.split()), **changes)
    (Path(path) / "tokenizer.json").write_text((tokenizer_dir / "tokenizer.json").read_text())
    r = run_sparkd("generate", "--model", path, "--prompt", "a", "--max-tokens", "1")
    assert r.returncode == 2, r.stdout + r.stderr
    for field in fields:
        assert field in r.stderr, r.stderr


def test_check_refuses_a_gguf_nvfp4_scale_of_nan(out_dir):
    path, _, _ = model(out_dir, "llama_nvfp4.gguf", label="_scale_nan", gguf_scale_nan="blk.0.attn_q.scale")
    err = check_refuses(path, "NaN")
    # The sidecar by its GGUF name, or the tensor by the Hugging Face name sparkd reads it as.
    assert "blk.0.attn_q.scale" in err or ("model.layers.0.self_attn.q_proj" in err and "scale" in err), err


@pytest.mark.parametrize("name", ["llama-3.1-8b-nvfp4", "qwen3-30b-a3b-nvfp4", "qwen3.6-35b-a3b-nvfp4"])
def test_device_plan_counts_nvfp4_at_its_stored_size(tmp_path, name):
    """`sparkd check --device gb10` on a ModelOpt NVFP4 checkpoint's tensor table (the data a
    hole): the device keeps the blocks as stored (plus a scale a row), within 1% of the file's
    tensors, and projects a batch-1 rate from the bytes a token reads."""
    import re
    import shape_modelopt
    path = tmp_path / name
    shape_modelopt.write_shape(name, str(path))
    r = run_sparkd("check", "--model", path, "--device", "gb10")
    assert r.returncode == 0, r.stdout + r.stderr
    ratio = float(re.search(r"the file's tensors: [0-9.]+ GiB; ([0-9.]+)x", r.stdout).group(1))
    assert 1.0 <= ratio <= 1.01, r.stdout
    rate = re.search(r"decode \(proj.\)\s+(.*)", r.stdout).group(1)
    print(f"\n{name}: device bytes {ratio:.3f}x the file's tensors; {rate}")


def test_a_checkpoint_calibrated_for_an_fp8_kv_cache_gets_one(tmp_path):
    """kv_cache_quant_algo FP8 (k_scale / v_scale beside each attention layer): with
    engine.kv_cache_dtype = "auto" the CUDA plan keeps the KV cache in FP8, half the 16-bit
    bytes a token; the CPU backend keeps f32 whatever the checkpoint says."""
    import re
    import shape_modelopt
    kv = {}
    for fp8 in (False, True):
        path = tmp_path / f"kv_fp8_{fp8}"
        shape_modelopt.write_shape("llama-3.1-8b-nvfp4", str(path), kv_fp8=fp8)
        r = run_sparkd("check", "--model", path, "--device", "gb10")
        assert r.returncode == 0, r.stdout + r.stderr
        kv[fp8] = re.search(r"kv cache dtype\s+(\w+), (\d+) bytes/token", r.stdout).groups()
        cpu = run_sparkd("check", "--model", path)  # the plan is printed, fitting or not (exit 2)
        assert re.search(r"kv cache dtype\s+f32,", cpu.stdout), cpu.stdout
    assert kv[False][0] == "bf16" and kv[True][0] == "fp8", kv
    # 32 layers x 8 KV heads x 128 x (K and V): 2 bytes a value, or 1 and a scale byte a head.
    assert int(kv[False][1]) == 32 * 2 * 8 * 128 * 2, kv
    assert int(kv[True][1]) == 32 * 2 * 8 * (128 + 1), kv


@pytest.mark.parametrize("model", ["qwen3_5", "nemotron_h"])
def test_hybrid_nvfp4_matches_transformers_on_its_values(tmp_path, model):
    """A tiny hybrid with its projections in NVFP4 (tests/gen/gen_modelopt_hybrid.py: the
    Qwen3.5's DeltaNet and gated attention layers, every projection; the Nemotron-H's Mamba-2
    out_proj, attention o_proj and squared-ReLU experts' down projections), served, against
    transformers' f32 forward over the values the checkpoint holds (nvfp4_golden.json,
    tests/gen/gen_nvfp4_hybrid_golden.py): the top-20 next-token log-probabilities at every
    prefix of three golden sequences."""
    import hashlib
    import gen_modelopt_hybrid
    golden = json.loads((MODELS / model / "nvfp4_golden.json").read_text())
    nvfp4, values = gen_modelopt_hybrid.write(str(tmp_path), model)
    assert hashlib.sha256((Path(values) / "model.safetensors").read_bytes()).hexdigest() == golden["values_sha256"], \
        "gen_modelopt_hybrid writes other values than nvfp4_golden.json was computed from: rerun its generator"
    eos = json.loads((MODELS / model / "generation_config.json").read_text())["eos_token_id"]
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    (tok / "tokenizer.json").write_text(json.dumps(char_tokenizer(eos)))
    (tok / "tokenizer_config.json").write_text(json.dumps({"eos_token": chr(BASE + eos)}))
    served = served_logprobs(nvfp4, tok, golden["sequences"])
    worst = 0.0
    for got_rows, want_rows in zip(served, golden["rows"]):
        for got, want in zip(got_rows, want_rows):
            wanted = dict(zip(want["ids"], want["logprobs"]))
            common = set(got) & set(wanted)  # all 20 but for a near-tie at the 20th
            assert len(common) >= TOP - 1, (got, wanted)
            worst = max([worst] + [abs(got[t] - wanted[t]) / want["max_abs_logit"] for t in common])
    print(f"\n{model} NVFP4 against transformers on its values: max |log-probability error| / max |logit| = "
          f"{worst:.2e}")
    assert worst < LIMIT
