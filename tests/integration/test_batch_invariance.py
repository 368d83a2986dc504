"""Batch invariance through the real server: a greedy request gives the same tokens alone and
among 15 others of other lengths, which share its steps (mixed prefills and decodes, other
batch sizes, another graph bucket on the CUDA path). Logprobs are compared too: the first
divergence shows as a changed value before it flips a token."""
import random
from concurrent.futures import ThreadPoolExecutor

import requests
import pytest

from conftest import model_id

pytestmark = pytest.mark.cuda_path  # also runs against the emulated CUDA server (conftest.py)

MODEL = model_id()
PROBE = "List the planets of the solar system in order, with one fact about each."


def complete(url, prompt, max_tokens):
    r = requests.post(url + "/v1/completions", timeout=600, json={
        "model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logprobs": 1})
    assert r.status_code == 200, r.text[:300]
    lp = r.json()["choices"][0]["logprobs"]
    return lp["tokens"], lp["token_logprobs"]


def test_a_request_alone_and_among_15_others_gives_the_same_tokens(api_server):
    url = api_server.url
    alone_tokens, alone_logprobs = complete(url, PROBE, 24)
    rng = random.Random(5)
    words = "river stone cloud lamp orbit signal garden copper winter table".split()
    others = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 120))) for _ in range(15)]
    with ThreadPoolExecutor(16) as pool:
        crowd = [pool.submit(complete, url, p, rng.randint(8, 40)) for p in others]
        probe = pool.submit(complete, url, PROBE, 24)
        for f in crowd:
            f.result()
        tokens, logprobs = probe.result()
    assert tokens == alone_tokens
    assert max(abs(a - b) for a, b in zip(logprobs, alone_logprobs)) < 1e-3
