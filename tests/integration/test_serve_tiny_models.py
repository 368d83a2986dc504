"""Safetensors models of nine architectures (Llama, Qwen3, Qwen3-MoE, gpt-oss, the Qwen3.5
hybrids, Nemotron-H, Gemma 3 and Gemma 4, dense and MoE, the last on the CPU backend only) served over HTTP and answered
through the openai SDK, checked against Hugging Face transformers.

The tiny models in tests/golden/models (tests/gen/gen_tiny_models.py) have a 256-token
vocabulary (the tiny Gemmas', 128) and no tokenizer; each test copy gets a BPE tokenizer.json whose tokens are
single CJK characters (U+4E00 + id), so any output text maps back to its token ids. The
oracle is golden.json: transformers' logits at every position of four token sequences; the
server's greedy next token after each prefix must be that row's argmax (rows whose top-2
margin is a near-tie for the backend's precision are left out).
"""
import json
import shutil
import struct
import time

import openai
import pytest
import requests

from conftest import EMULATED_GPU, REPO, Server

pytestmark = pytest.mark.cuda_path  # also runs against the emulated CUDA server (conftest.py)

MODELS = REPO / "tests" / "golden" / "models"
BASE = 0x4E00
TIE_MARGIN = 1e-3  # logits closer than this may swap under f32 rounding of another order
# The CUDA backend computes Qwen models in BF16 and the others in FP16: a top-2 margin below
# twice the logits error that precision allows (max |logit| x limit, the limits of
# tests/gpu/check_model.cu) may swap there.
# The tiny Qwen3.5's measured BF16 logits error against the CPU was 2.9e-2 (check_model
# compares the hybrids in FP16, with the weights rounded on both sides).
# The tiny Gemma 3 ships BF16 weights, which the CUDA backend computes in BF16.
CUDA_LOGITS_LIMIT = {"llama": 3e-3, "qwen3": 2e-2, "qwen3_moe": 2e-2, "gpt_oss_separated": 3e-3, "qwen3_5": 5e-2,
                     "gemma3": 2e-2, "gemma4": 2e-2}


def tie_margin(name, row):
    if not EMULATED_GPU:
        return TIE_MARGIN
    return max(TIE_MARGIN, 2 * CUDA_LOGITS_LIMIT[name] * max(abs(v) for v in row))


def char_tokenizer(eos_id, vocab_size=256):
    vocab = {chr(BASE + i): i for i in range(vocab_size)}
    return {"version": "1.0", "truncation": None, "padding": None, "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": None,
            "added_tokens": [{"id": eos_id, "content": chr(BASE + eos_id), "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True}],
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": []}}


def served_copy(name, tmp_path, src=None):
    """A copy of model folder `src` (tests/golden/models/<name> by default) in tmp_path/<name>
    with a tokenizer of one character a token id and a chat template that joins the messages."""
    src = src or MODELS / name
    d = tmp_path / name
    shutil.copytree(src, d)
    eos = eos_id(name, src)
    vocab_size = json.loads((src / "golden.json").read_text())["vocab_size"]
    (d / "tokenizer.json").write_text(json.dumps(char_tokenizer(eos, vocab_size)))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": chr(BASE + eos),
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}))
    return d


def recurrent_state_bytes(name, slots):
    """A hybrid's state slots from its config alone: per DeltaNet layer, the conv's last
    (kernel - 1) inputs of its q, k and v channels and a dk x dv state per value head, f32;
    per Mamba-2 layer (Nemotron-H's 'M's), the conv's last (kernel - 1) inputs of its x, B
    and C channels and a head_dim x state_size state per head, f32."""
    cfg = json.loads((MODELS / name / "config.json").read_text())  # python's json reads the bare Infinity
    c = cfg.get("text_config", cfg)
    if "mamba_num_heads" in c:
        heads, head_dim, state = c["mamba_num_heads"], c["mamba_head_dim"], c["ssm_state_size"]
        conv_dim = heads * head_dim + 2 * c["n_groups"] * state
        per_layer = (c["conv_kernel"] - 1) * conv_dim + heads * head_dim * state
        return c["hybrid_override_pattern"].count("M") * per_layer * 4 * slots
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
    per_layer = (c["linear_conv_kernel_dim"] - 1) * (2 * nk * dk + nv * dv) + nv * dk * dv
    layers = sum(t == "linear_attention" for t in c["layer_types"])
    return layers * per_layer * 4 * slots


def eos_id(name, src=None):
    """The first of the model's EOS ids (the tokenizer's special token; the others are plain)."""
    eos = json.loads(((src or MODELS / name) / "generation_config.json").read_text())["eos_token_id"]
    return eos[0] if isinstance(eos, list) else eos


def golden_rows(name):
    """(prefix ids, transformers' greedy next id) for every prefix that is not a near-tie."""
    g = json.loads((MODELS / name / "golden.json").read_text())
    vocab = g["vocab_size"]
    out = []
    for seq, logits_file in zip(g["sequences"], g["logits"]):
        raw = (MODELS / name / logits_file).read_bytes()
        values = struct.unpack(f"<{len(raw) // 4}f", raw)
        for pos in range(len(seq)):
            row = values[pos * vocab:(pos + 1) * vocab]
            top = sorted(range(vocab), key=lambda i: -row[i])
            if row[top[0]] - row[top[1]] >= tie_margin(name, row):
                out.append((seq[:pos + 1], top[0]))
    return out


# The CUDA backend holds this f32 model's matrices in 16 bits, which flips its random
# router's top-4 on the 40-token prompt (3.8e-2 of the logits against the f32 CPU backend);
# the same weights with separated routing (gpt_oss_separated, tests/gen/gen_gptoss.py) run
# on every backend instead.
GPTOSS_16BIT = "16-bit weights flip this tiny model's near-uniform router; gpt_oss_separated runs instead"


# 16-bit activations tip these tiny models' near-uniform routers on a few rows in 80 (the tiny
# Nemotron-H's 2nd and 3rd selection scores come within 1.06e-3, its golden.json notes; 2 rows
# of 76 in BF16); check_model holds the device MoE path to its own rule.
ROUTER_FLIPS = pytest.mark.skipif(EMULATED_GPU, reason="16-bit activations flip this tiny model's near-uniform router")


@pytest.mark.parametrize("name", ["llama", "qwen3", pytest.param("qwen3_moe", marks=ROUTER_FLIPS),
    pytest.param("gpt_oss", marks=pytest.mark.skipif(
        EMULATED_GPU, reason=GPTOSS_16BIT)), "gpt_oss_separated",
    pytest.param("qwen3_5_moe", marks=ROUTER_FLIPS), "qwen3_5", pytest.param("qwen3_next", marks=ROUTER_FLIPS),
    pytest.param("nemotron_h", marks=ROUTER_FLIPS), "gemma3", "gemma4",
    pytest.param("gemma4_moe", marks=ROUTER_FLIPS)])
def test_tiny_safetensors_model_over_http_matches_transformers(name, tmp_path):
    rows = golden_rows(name)
    assert len(rows) >= 40, f"only {len(rows)} golden rows clear of ties"
    s = Server(model=served_copy(name, tmp_path), settings={
        "model.max_model_len": 256, "engine.max_num_seqs": 8}).wait_ready()
    # Closed before the server stops: an idle keep-alive connection holds a stop for its
    # 5 s timeout.
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    try:
        served = client.models.list().data[0].id
        assert served == name
        # Token-id prompts, as the completions API takes them; one greedy token each.
        wrong = []
        for prefix, want in rows:
            r = client.completions.create(model=served, prompt=prefix, max_tokens=1, temperature=0,
                                          extra_body={"ignore_eos": True})
            got = [ord(c) - BASE for c in r.choices[0].text]
            if got != ([] if want == eos_id(name) else [want]):  # EOS is a special token: no text
                wrong.append((len(prefix), want, got))
        assert not wrong, f"{len(wrong)} of {len(rows)} next tokens differ from transformers: {wrong[:5]}"
        # The chat API on the same model: text in, text out, usage counted.
        text = "".join(chr(BASE + i) for i in rows[-1][0])
        chat = client.chat.completions.create(model=served, messages=[{"role": "user", "content": text}],
                                              max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
        assert chat.usage.prompt_tokens == len(rows[-1][0])
        if rows[-1][1] != eos_id(name):
            assert ord(chat.choices[0].message.content[0]) - BASE == rows[-1][1]
        # A hybrid's state slots are memory the dashboard shows beside the weights and KV.
        if name.startswith("qwen3_5") or name.startswith("qwen3_next") or name == "nemotron_h":
            deadline = time.time() + 10
            while not (series := requests.get(s.url + "/api/snapshot", timeout=10).json()["series"]).get("t"):
                assert time.time() < deadline, "no dashboard point within 10 s"
                time.sleep(0.2)
            # 8 running sequences and 16 state checkpoints (twice engine.max_num_seqs).
            assert series["mem_state"][-1] == recurrent_state_bytes(name, 8 + 16)
            assert series["mem_kv"][-1] > 0 and series["mem_weights"][-1] > 0
    finally:
        client.close()
        s.stop()


@pytest.mark.parametrize("name", [pytest.param("gpt_oss", marks=pytest.mark.skipif(EMULATED_GPU, reason=GPTOSS_16BIT)),
                                  "gpt_oss_separated"])
def test_gptoss_greedy_tokens_among_31_other_requests(name, tmp_path):
    """32 prompts at once (one batch of mixed lengths, sliding-window layers, prefix-cache
    hits among the shared prefixes): each greedy next token still equals transformers'."""
    from concurrent.futures import ThreadPoolExecutor
    rows = golden_rows(name)[-32:]
    assert len(rows) == 32
    s = Server(model=served_copy(name, tmp_path), settings={
        "model.max_model_len": 256, "engine.max_num_seqs": 32}).wait_ready()
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    try:

        def one(row):
            prefix, want = row
            r = client.completions.create(model=name, prompt=prefix, max_tokens=1, temperature=0,
                                          extra_body={"ignore_eos": True})
            got = [ord(c) - BASE for c in r.choices[0].text]
            return got == ([] if want == eos_id(name) else [want])

        with ThreadPoolExecutor(32) as pool:
            same = list(pool.map(one, rows))
        assert all(same), f"{same.count(False)} of 32 concurrent next tokens differ from transformers"
    finally:
        client.close()
        s.stop()


