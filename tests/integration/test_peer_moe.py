"""Peer mode with a mixture-of-experts model: the tiny Qwen3-MoE (layers 0 and 2 MoE, layer 1
dense) split between a head and a worker over loopback TCP (CPU backend) must give the
single process's greedy tokens, token for token, whichever side holds the MoE layers.
"""
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import Server, free_port
from test_serve_tiny_models import served_copy

COMMON = {"engine.cpu_threads": 1, "engine.max_num_seqs": 8, "model.max_model_len": 256}
# Token-id prompts: the golden sequences' openings and a few more, run concurrently.
PROMPTS = [[3, 17, 42, 99, 7], [250, 1, 1, 1], [5] * 12, list(range(30, 70)), [200, 100, 50, 25, 12, 6, 3]]


def greedy(url, prompt):
    r = requests.post(url + "/v1/completions", timeout=120, json={
        "prompt": prompt, "max_tokens": 16, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def run_all(url):
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(lambda p: greedy(url, p), PROMPTS))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return served_copy("qwen3_moe", tmp_path_factory.mktemp("moe"))


@pytest.fixture(scope="module")
def single(model):
    s = Server(COMMON, model=model).wait_ready()
    yield run_all(s.url)
    s.stop()


# Worker from layer 1 (head: the MoE layer 0) or from layer 2 (worker: the MoE layer 2).
@pytest.mark.parametrize("split", ["1", "2"])
def test_moe_pair_matches_single_process(model, single, split):
    addr = f"127.0.0.1:{free_port()}"
    peer = {"peer.enabled": True, "peer.transport": "tcp", "peer.head_addr": addr, "peer.timeout_s": 5.0,
            "peer.layer_split": split}
    head = Server({**COMMON, **peer, "peer.role": "head"}, model=model)
    worker = Server({**COMMON, **peer, "peer.role": "worker"}, model=model)
    try:
        head.wait_ready(120)
        got = run_all(head.url)
    finally:
        worker.stop()
        head.stop()
    assert got == single, f"split at layer {split}: pair {got!r} != single {single!r}"
    assert any(len(t) > 0 for t in got)
