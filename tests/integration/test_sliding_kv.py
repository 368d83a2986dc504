"""Sliding-window layers keep K and V only for the blocks their window reaches: blocks
behind a sequence's window move to blocks the full-attention layers alone hold
(engine/core/block_manager.h). Served by `sparkd serve` on the tiny gpt-oss model (2 of 4
layers sliding), the tiny Gemma 3 (3 of 4, with its own RoPE; FP16 on the emulated CUDA
server, as gpt-oss computes there) and the tiny Gemma 4s, dense and MoE (2 of 4, the full
layers with their own KV shape; the CPU backend only), each with a window of 8 tokens and blocks of 4 (of 8 on
the emulated CUDA server, whose attention takes no smaller), with prompts far longer than
the window:

- a greedy request gives the same tokens (and logprobs) alone and among 31 others;
- prefix-cache hits, early blocks read from full-only copies and the window from window
  blocks, reproduce the logprobs of a server without prefix caching;
- a server whose sliding layers hold 12 blocks of 4 (48 tokens; 8 of 8 on the emulated
  server) serves 250-token sequences, two at a time, with the tokens of the large server:
  blocks behind the window went back.
"""
import json
import random
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import EMULATED_GPU, Server
from test_gptoss_harmony_serve import MODEL, TEMPLATE, tokenizer
from test_serve_tiny_models import served_copy

BLOCK = 8 if EMULATED_GPU else 4
# The tests marked cuda_path compare two runs of one backend, so the emulated CUDA server
# runs them too (its sliding layers hold the window blocks as the CPU backend's do). It
# computes in FP16 and picks a step's GEMM kernels by its row count, so one token's
# logprobs under two schedules differ by rounding (measured up to 1.2e-3; FP16's logits
# limit in tests/gpu is 3e-3); the CPU backend's f32 keeps them within 1e-4. Its probe and
# crowd are shorter (the emulator runs the tiny model at tens of tokens a second), still 32
# sequences at once, each past the window.
# The tiny Gemmas' logits are larger (Gemma 3's rows reach ~30), and so are FP16's roundings of
# their logprobs: measured 3.2e-3 on the emulated server, held to 1e-2 there.
PREFIX_TOL, SCHEDULE_TOL = (3e-3, 3e-3) if EMULATED_GPU else (1e-4, 1e-3)
GEMMA_EMULATED_TOL = 1e-2
# (prompt, output) lengths: the probe's, and the ranges of the 31 others'.
PROBE, CROWD_PROMPT, CROWD_OUTPUT = ((80, 16), (12, 40), (2, 8)) if EMULATED_GPU else ((150, 48), (20, 200), (8, 40))
LARGE = {"model.max_model_len": 256, "engine.max_num_seqs": 32, "engine.block_size": BLOCK,
         "engine.max_num_batched_tokens": 64}
SMALL = {"model.max_model_len": 256, "engine.max_num_seqs": 2, "engine.block_size": BLOCK,
         "engine.max_num_batched_tokens": 16, "engine.enable_prefix_caching": False}


# model -> (its vocabulary's size, the plan's sliding-layer count line). Gemma 4's sliding
# and full layers differ in KV heads and head width (2 x 16 against 1 x 32 with K = V in
# gemma4, 2 x 32 in gemma4_moe), so its window and full-only blocks differ in bytes too. The
# emulated server runs the dense one (check_model holds the MoE block on the device).
MODELS = {"gpt_oss": (256, "2 of 4"), "gemma3": (128, "3 of 4"), "gemma4": (128, "2 of 4"),
          "gemma4_moe": (128, "2 of 4")}
SERVED = [m for m in MODELS if not (EMULATED_GPU and m == "gemma4_moe")]


def model_dir(tmp_path_factory, name):
    if name.startswith("gemma"):
        return served_copy(name, tmp_path_factory.mktemp(name))
    d = tmp_path_factory.mktemp("gptoss") / "gpt_oss"
    shutil.copytree(MODEL, d)
    (d / "tokenizer.json").write_text(json.dumps(tokenizer()))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>", "chat_template": TEMPLATE}))
    return d


@pytest.fixture(scope="module", params=SERVED)
def servers(tmp_path_factory, request):
    d = model_dir(tmp_path_factory, request.param)
    # The Gemmas' BF16 weights would compute in BF16; FP16, as gpt-oss runs, holds the tolerances.
    gemma = EMULATED_GPU and request.param.startswith("gemma")
    dtype = {"model.dtype": "fp16"} if gemma else {}
    with Server(model=d, settings={**LARGE, **dtype}) as large, Server(model=d, settings={**SMALL, **dtype}) as small:
        large.wait_ready(), small.wait_ready()
        large.vocab, large.sliding = small.vocab, small.sliding = MODELS[request.param]
        large.prefix_tol, large.schedule_tol = (GEMMA_EMULATED_TOL,) * 2 if gemma else (PREFIX_TOL, SCHEDULE_TOL)
        yield large, small


def prompt(rng, n, vocab):
    return [rng.randrange(3, vocab) for _ in range(n)]  # no EOS (gpt-oss 2, Gemma 1), no unused ids 0 and 1


def complete(server, ids, max_tokens):
    model = requests.get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    r = requests.post(server.url + "/v1/completions", timeout=300, json={
        "model": model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0, "logprobs": 5,
        "ignore_eos": True})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    lp = body["choices"][0]["logprobs"]
    cached = (body["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], cached


def close(a, b, tol):
    """Same tokens, same top-5 alternatives, logprobs within tol."""
    assert a[0] == b[0]
    assert max(abs(x - y) for x, y in zip(a[1], b[1])) < tol
    for ta, tb in zip(a[2], b[2]):
        assert ta.keys() == tb.keys()
        assert max(abs(ta[k] - tb[k]) for k in ta) < tol


def window_blocks_needed(max_num_seqs, step_tokens):
    """memory_plan.cpp's rule: each sequence's window (ceil(7 / BLOCK) + 2 blocks) and a step."""
    return max_num_seqs * (-(-7 // BLOCK) + 2) + step_tokens // BLOCK


def plan_line(server):
    m = re.search(r"sliding layers +" + server.sliding + r" see the last 8 tokens and hold (\d+) of the (\d+) blocks",
                  server.output())
    assert m, server.output()
    used = re.search(r"kv blocks used +(\d+)", server.output())
    return int(m.group(1)), int(used.group(1))


@pytest.mark.cuda_path
def test_greedy_alone_and_among_31_others(servers):
    large, _ = servers
    rng = random.Random(22)
    probe = prompt(rng, PROBE[0], large.vocab)
    alone = complete(large, probe, PROBE[1])
    others = [prompt(rng, rng.randint(*CROWD_PROMPT), large.vocab) for _ in range(31)]
    with ThreadPoolExecutor(32) as pool:
        crowd = [pool.submit(complete, large, p, rng.randint(*CROWD_OUTPUT)) for p in others]
        together = pool.submit(complete, large, probe, PROBE[1])
        for f in crowd:
            f.result()
        close(together.result(), alone, large.schedule_tol)
    window_blocks, blocks = plan_line(large)
    assert window_blocks == window_blocks_needed(32, 64) < blocks  # the crowd alone holds ~4,000 tokens


@pytest.mark.cuda_path
def test_prefix_hits_reproduce_the_cold_logits(servers):
    large, cold = servers
    rng = random.Random(7)
    p = prompt(rng, 160, large.vocab)
    q = p + prompt(rng, 20, large.vocab)
    first = complete(large, q, 4)
    assert first[3] == 0
    close(first, complete(cold, q, 4), large.prefix_tol)
    # The same prompt: every full block but the last token's, the early ones from the
    # full-only blocks its prefill moved them to.
    again = complete(large, q, 4)
    assert again[3] == (len(q) - 1) // BLOCK * BLOCK
    close(again, first, large.prefix_tol)
    # Another suffix: the hit ends inside blocks q's decode moved out of its window; their
    # window copies are still cached, so all of p is served.
    r = p + prompt(rng, 30, large.vocab)
    hit = complete(large, r, 4)
    assert hit[3] == len(p)
    close(hit, complete(cold, r, 4), large.prefix_tol)


def test_sliding_layers_holding_48_tokens_serve_250_token_sequences(servers):
    large, small = servers
    window_blocks, blocks = plan_line(small)
    assert window_blocks == window_blocks_needed(2, 16) and window_blocks * BLOCK < 250 <= blocks * BLOCK
    rng = random.Random(3)
    prompts = [prompt(rng, 200, large.vocab), prompt(rng, 210, large.vocab)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda ids: complete(small, ids, 250 - len(ids)), prompts))
    for ids, got in zip(prompts, results):
        assert len(got[0]) == 250 - len(ids)
        close(got, complete(large, ids, 250 - len(ids)), 1e-3)
