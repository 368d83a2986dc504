"""[model] quantize = "q8_0" | "fp8" (and quantize_keep): a checkpoint's 16-bit and f32 weight
matrices quantized as they load (engine/model/load_quantization.cpp), checked against the
same models quantized offline.

The oracle is built here, from the tiny models of tests/golden/models (Llama, Qwen3-MoE, and
gpt-oss with its attention matrices stored in BF16 beside its MXFP4 experts): a copy whose
tensors that the rule selects are replaced by their quantized-then-dequantized values, stored
as F32 under the same names (every other tensor and file unchanged). Q8_0 by the `gguf`
package (gguf.quants.quantize then dequantize, llama.cpp's rule); FP8 by the numpy e4m3
encoder below (nearest of the 256 decoded e4m3 values, ties to the even code, saturating at
448, one f32 scale a row = max|row| / 448), never by sparkd. The original served with
quantize = X and the copy served with quantize = "none" (CPU backend) must give the same
greedy tokens and top-20 logprobs within 1e-4 at every generated position; the unquantized
original must differ from both by clearly more, so the quantization did happen.

Also: `sparkd check` refuses bad quantize settings, naming the key, and its memory plan
counts the weights as quantized (Q8_0: 34 bytes a 32 values; FP8: a byte a value and 4 a row;
the rest as stored), computed here from the safetensors headers.
"""
import json
import math
import re
import shutil
import struct

import numpy as np
import pytest
import requests
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants

from conftest import REPO, Server, run_sparkd, to_toml
from test_serve_tiny_models import BASE, char_tokenizer, eos_id

MODELS = REPO / "tests" / "golden" / "models"
TOL = 1e-4            # the bound on the CPU backend
CLEARLY_MORE = 1e-3   # what the quantization itself must move (10 x TOL)
TOP = 20              # kMaxTopLogprobs (engine/step/sampling_params.h)
MAX_TOKENS = 8
FLOAT_DTYPES = ("F32", "F16", "BF16")
# The tiny gpt-oss served with its attention matrices in BF16 (as gpt-oss checkpoints store
# them; its experts stay MXFP4, which quantize leaves alone).
BF16_ATTENTION = {"gpt_oss"}


# ---- safetensors, read and written by hand (BF16 and U8 included) --------------------------

def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} in the file's order, and its metadata."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    data = raw[8 + n:]
    tensors = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        tensors[name] = (h["dtype"], list(h["shape"]), data[a:b])
    return tensors, meta


def write_safetensors(path, tensors, meta):
    header, blobs, offset = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def to_f32(dtype, shape, blob):
    if dtype == "F32":
        return np.frombuffer(blob, "<f4").reshape(shape).copy()
    if dtype == "F16":
        return np.frombuffer(blob, "<f2").astype(np.float32).reshape(shape)
    assert dtype == "BF16", dtype
    return (np.frombuffer(blob, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)


def f32_to_bf16_bytes(x):
    """Round to nearest, ties to even (no NaN in these weights)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


# ---- which tensors quantize changes: load_quantization.h's rule, by tensor name -------------

def part_of(name):
    """The quantize_keep part a 2-D weight belongs to, or None (routers, norms, biases...)."""
    if name == "lm_head.weight":
        return "lm_head"
    if name == "model.embed_tokens.weight":
        return "embedding"
    if re.fullmatch(r"model\.layers\.\d+\.self_attn\.[qkvo]_proj\.weight", name):
        return "attention"
    if re.fullmatch(r"model\.layers\.\d+\.linear_attn\.(in_proj_(qkv|z|b|a)|out_proj)\.weight", name):
        return "attention"
    if re.fullmatch(r"model\.layers\.\d+\.mlp\.(experts\.\d+|shared_expert)\.(gate|up|down)_proj\.weight", name):
        return "experts"
    if re.fullmatch(r"model\.layers\.\d+\.mlp\.(gate|up|down)_proj\.weight", name):
        return "mlp"
    return None


def selected(name, dtype, shape, quantize, keep):
    """Whether sparkd serves this stored tensor quantized (none of these models ties its head)."""
    part = part_of(name)
    if quantize == "none" or part is None or part in keep or dtype not in FLOAT_DTYPES or len(shape) != 2:
        return False
    if quantize == "fp8" and part == "embedding":
        return False
    return quantize == "fp8" or shape[-1] % 32 == 0


# ---- the offline quantizers ---------------------------------------------------------------

def e4m3_values():
    """The 256 e4m3 (OCP FP8 E4M3FN) codes decoded: bias 7, no infinities, S.1111.111 NaN."""
    out = np.empty(256, np.float64)
    for code in range(256):
        e, m = (code >> 3) & 0xF, code & 7
        v = m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        out[code] = math.nan if (code & 0x7F) == 0x7F else (-v if code & 0x80 else v)
    return out


E4M3 = e4m3_values()
E4M3_POSITIVE = E4M3[:0x7F]  # codes 0..126, increasing, 0 to 448


def e4m3_encode(x):
    """f32 -> e4m3 codes: the nearest decoded value (ties to the even code), |x| saturated at
    448, the sign kept."""
    x = np.asarray(x, np.float32)
    a = np.minimum(np.abs(x).astype(np.float64), 448.0)
    hi = np.clip(np.searchsorted(E4M3_POSITIVE, a), 1, 0x7E)
    lo = hi - 1
    d_lo, d_hi = a - E4M3_POSITIVE[lo], E4M3_POSITIVE[hi] - a
    code = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (code | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def fp8_roundtrip(w):
    """Rows of f32 -> e4m3 with one f32 scale a row (max|row| / 448, 1 for a zero row) -> f32."""
    w = np.asarray(w, np.float32)
    amax = np.abs(w).max(axis=1, keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
    codes = e4m3_encode(w / scale)
    return (E4M3[codes].astype(np.float32) * scale).astype(np.float32)


def q8_0_roundtrip(w):
    q = gguf_quants.quantize(np.asarray(w, np.float32), GGMLQuantizationType.Q8_0)
    return gguf_quants.dequantize(q, GGMLQuantizationType.Q8_0).astype(np.float32)


def test_e4m3_encoder_spot_values():
    """The oracle's FP8 encoder on values whose codes the OCP spec fixes."""
    cases = {0.0: 0x00, 1.0: 0x38, -1.0: 0xB8, 448.0: 0x7E, 1e6: 0x7E, -1e6: 0xFE, 2.0 ** -9: 0x01,
             2.0 ** -6: 0x08, 1.0625: 0x38, 1.1875: 0x3A, 3 * 2.0 ** -10: 0x02, 2.0 ** -10: 0x00,
             464.0: 0x7E, 240.0: 0x77, 0.875 * 2.0 ** -6: 0x07, 0.9375 * 2.0 ** -6: 0x08}
    got = e4m3_encode(np.array(list(cases), np.float32))
    assert [hex(c) for c in got] == [hex(c) for c in cases.values()]
    # Every finite code decodes and encodes back to itself.
    finite = [c for c in range(256) if not math.isnan(E4M3[c])]
    assert list(e4m3_encode(E4M3[finite].astype(np.float32))) == finite


# ---- the model copies ----------------------------------------------------------------------

def write_served(d, name, tensors, meta):
    """A model folder: the golden one's files, `tensors` as its weights, the char tokenizer."""
    shutil.copytree(MODELS / name, d)
    write_safetensors(d / "model.safetensors", tensors, meta)
    eos = eos_id(name)
    (d / "tokenizer.json").write_text(json.dumps(char_tokenizer(eos)))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": chr(BASE + eos), "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}))
    return d


def original_tensors(name):
    """The weights served as the original: the golden file's, gpt-oss's attention in BF16."""
    tensors, meta = read_safetensors(MODELS / name / "model.safetensors")
    if name in BF16_ATTENTION:
        for t, (dtype, shape, blob) in list(tensors.items()):
            if part_of(t) == "attention":
                assert dtype == "F32"
                tensors[t] = ("BF16", shape, f32_to_bf16_bytes(to_f32(dtype, shape, blob)))
    return tensors, meta


def oracle_tensors(name, quantize, keep):
    """The original's weights with each tensor the rule selects quantized and dequantized
    offline, as F32; also the names replaced."""
    tensors, meta = original_tensors(name)
    roundtrip = q8_0_roundtrip if quantize == "q8_0" else fp8_roundtrip
    replaced = []
    for t, (dtype, shape, blob) in list(tensors.items()):
        if selected(t, dtype, shape, quantize, keep):
            w = roundtrip(to_f32(dtype, shape, blob))
            assert w.shape == tuple(shape) and np.isfinite(w).all()
            tensors[t] = ("F32", shape, w.astype("<f4").tobytes())
            replaced.append(t)
    return tensors, meta, replaced


# ---- serving and comparing -----------------------------------------------------------------

def prompts(name):
    """Four token-id prompts (1, 7, 23 and 40 tokens): the golden sequences."""
    return json.loads((MODELS / name / "golden.json").read_text())["sequences"]


def greedy_with_logprobs(url, name):
    """Per prompt: the greedy tokens and the top-20 logprobs at each generated position."""
    out = []
    for p in prompts(name):
        r = requests.post(url + "/v1/completions", timeout=60, json={
            "model": name, "prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0, "logprobs": TOP,
            "ignore_eos": True})
        assert r.status_code == 200, r.text
        lp = r.json()["choices"][0]["logprobs"]
        assert len(lp["tokens"]) == MAX_TOKENS and all(len(t) == TOP for t in lp["top_logprobs"])
        out.append(list(zip(lp["tokens"], lp["top_logprobs"])))
    return out


def compare(a, b):
    """The largest |logprob difference| over the top-20 entries both list, at every position of
    every prompt up to where the greedy tokens part; and where they part (or None)."""
    worst, parted = 0.0, None
    for i, (pa, pb) in enumerate(zip(a, b)):
        for pos, ((ta, topa), (tb, topb)) in enumerate(zip(pa, pb)):
            for t in topa.keys() & topb.keys():
                worst = max(worst, abs(topa[t] - topb[t]))
            # A token in one top-20 only sits at the other's edge.
            for x, y in ((topa, topb), (topb, topa)):
                for t in x.keys() - y.keys():
                    worst = max(worst, x[t] - min(y.values()))
            if ta != tb:
                parted = parted or (i, pos, ta, tb, topa[ta] - topa.get(tb, -math.inf))
                break
    return worst, parted


class Runs:
    """Each (model, weights, quantize setting) served once, its answers kept for every test."""

    def __init__(self, tmp):
        self.tmp, self.answers, self.replaced = tmp, {}, {}

    def get(self, name, quantize="none", keep=(), oracle=None):
        """The original served with `quantize`/`keep`, or (oracle = (format, keep)) the offline
        copy served unquantized."""
        key = (name, quantize, tuple(keep), oracle)
        if key not in self.answers:
            d = self.tmp / "-".join([name, quantize, *keep, *(["oracle", oracle[0], *oracle[1]] if oracle else [])])
            if oracle:
                tensors, meta, replaced = oracle_tensors(name, oracle[0], oracle[1])
                self.replaced[(name, *oracle)] = replaced
            else:
                tensors, meta = original_tensors(name)
            write_served(d, name, tensors, meta)
            settings = {"model.name": name, "model.max_model_len": 256, "engine.max_num_seqs": 8,
                        "model.quantize": quantize}
            if keep:
                settings["model.quantize_keep"] = list(keep)
            s = Server(model=d, settings=settings).wait_ready()
            try:
                self.answers[key] = greedy_with_logprobs(s.url, name)
            finally:
                s.stop()
        return self.answers[key]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return Runs(tmp_path_factory.mktemp("load-quantization"))


# The tensors each full quantization replaces: a check that the oracle's rule selects what
# the issue says (attention, dense MLP, experts, head; the embedding by Q8_0 only; never the
# routers, norms, biases, sinks or gpt-oss's MXFP4 experts).
EXPECTED_REPLACED = {("llama", "q8_0"): 16, ("llama", "fp8"): 15,
                     ("qwen3_moe", "q8_0"): 3 * 4 + 3 + 2 * 8 * 3 + 2, ("qwen3_moe", "fp8"): 3 * 4 + 3 + 2 * 8 * 3 + 1,
                     ("gpt_oss", "q8_0"): 4 * 4 + 2, ("gpt_oss", "fp8"): 4 * 4 + 1}

CASES = [("llama", "q8_0", ()), ("llama", "fp8", ()), ("qwen3_moe", "q8_0", ()), ("qwen3_moe", "fp8", ()),
         ("gpt_oss", "q8_0", ()), ("gpt_oss", "fp8", ()),
         ("qwen3_moe", "q8_0", ("experts",)), ("llama", "fp8", ("lm_head", "embedding"))]


@pytest.mark.parametrize("name,quantize,keep", CASES,
                         ids=["-".join([n, q, *k]) for n, q, k in CASES])
def test_quantized_at_load_matches_offline_quantization(runs, name, quantize, keep):
    at_load = runs.get(name, quantize, keep)
    oracle = runs.get(name, oracle=(quantize, keep))
    replaced = runs.replaced[(name, quantize, keep)]
    if not keep:
        assert len(replaced) == EXPECTED_REPLACED[(name, quantize)], replaced
    else:
        assert replaced and not any(part_of(t) in keep for t in replaced), replaced

    diff, parted = compare(at_load, oracle)
    print(f"\n{name} {quantize} keep={list(keep)}: max |logprob at load - offline| = {diff:.3g}"
          f" ({len(replaced)} tensors)")
    assert parted is None or abs(parted[4]) <= TOL, f"greedy tokens part (prompt, position, tokens, margin): {parted}"
    assert diff <= TOL, f"logprobs of {name} quantized at load to {quantize} differ from the offline oracle by {diff}"

    # The test can fail: the unquantized model is clearly elsewhere, so both did quantize.
    plain = runs.get(name)
    moved, _ = compare(plain, at_load)
    print(f"{name} {quantize} keep={list(keep)}: max |logprob unquantized - at load| = {moved:.3g}")
    assert moved > CLEARLY_MORE, f"quantize = {quantize} left {name}'s logprobs within {moved} of the unquantized"
    if keep:  # and quantize_keep kept something: not the full quantization either
        full = runs.get(name, quantize)
        apart, _ = compare(full, at_load)
        assert apart > CLEARLY_MORE, f"quantize_keep = {list(keep)} changed {name}'s logprobs by only {apart}"


# ---- sparkd check ---------------------------------------------------------------------------

def config_file(tmp_path, settings):
    p = tmp_path / "spark.toml"
    p.write_text(to_toml(settings))
    return p


@pytest.mark.parametrize("settings,key,value", [
    ({"model.quantize": "int4"}, "quantize", "int4"),
    ({"model.quantize": "q8_0", "model.quantize_keep": ["router"]}, "quantize_keep", "router"),
    ({"model.quantize": "fp8", "model.quantize_keep": ["attention", "lm_heads"]}, "quantize_keep", "lm_heads"),
])
def test_check_refuses_bad_quantize_settings(tmp_path, settings, key, value):
    r = run_sparkd("check", "--config", config_file(tmp_path, {"model.path": str(MODELS / "llama"), **settings}))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"[model] {key}" in r.stderr and value in r.stderr, r.stderr
    assert "Aborted" not in r.stderr and "terminate" not in r.stderr


def format_bytes(b):
    """engine/model/memory_plan.cpp's format_bytes."""
    if b >= 1 << 30:
        return f"{b / (1 << 30):.2f} GiB"
    if b >= 1 << 20:
        return f"{b / (1 << 20):.1f} MiB"
    if b >= 1024:
        return f"{b / 1024:.1f} KiB"
    return f"{b} B"


def served_weight_bytes(tensors, quantize, keep):
    """The weights' bytes as sparkd serves them: selected matrices quantized, the rest as stored."""
    total = 0
    for t, (dtype, shape, blob) in tensors.items():
        if not selected(t, dtype, shape, quantize, keep):
            total += len(blob)
        elif quantize == "q8_0":
            total += math.prod(shape) // 32 * 34
        else:
            total += math.prod(shape) + 4 * shape[0]
    return total


@pytest.mark.parametrize("name", ["llama", "qwen3_moe", "gpt_oss"])
def test_check_memory_plan_counts_weights_as_quantized(tmp_path, name):
    tensors, meta = original_tensors(name)
    d = write_served(tmp_path / name, name, tensors, meta)
    shown = {}
    for quantize, keep in [("none", ()), ("q8_0", ()), ("fp8", ()), ("q8_0", ("experts", "lm_head"))]:
        settings = {"model.path": str(d), "model.quantize": quantize}
        if keep:
            settings["model.quantize_keep"] = list(keep)
        r = run_sparkd("check", "--config", config_file(tmp_path, settings))
        assert r.returncode == 0, r.stdout + r.stderr
        m = re.search(r"^memory plan.*?^\s+weights\s+(\S+ \S+)$", r.stdout, re.M | re.S)
        assert m, r.stdout
        want = served_weight_bytes(tensors, quantize, keep)
        assert m.group(1) == format_bytes(want), \
            f"{quantize} {list(keep)}: weights {m.group(1)}, want {format_bytes(want)} ({want} B)"
        shown[(quantize, keep)] = want
    assert shown[("q8_0", ())] < shown[("none", ())] and shown[("fp8", ())] < shown[("none", ())]
