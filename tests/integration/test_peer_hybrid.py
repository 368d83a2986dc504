"""Peer mode with a hybrid model: the tiny Qwen3.5-MoE (layers 0-2 Gated DeltaNet, layer 3
attention), the tiny Qwen3-Next and the tiny Nemotron-H (Mamba-2 blocks on both sides of
either split) split between a head and a worker over loopback TCP (CPU backend). Each box keeps the recurrent states of its own layers in the session's state
slots (Welcome::state_slots), each plan names every sequence's slot, and the pair must give
the single process's greedy tokens, token for token, whether the worker holds DeltaNet
layers or only the attention layer. A session whose slots disagree with the model is
refused by the worker's decoder (test_peer_messages in the unit tests).
"""
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from conftest import EMULATED_GPU, Server, free_port
from test_serve_tiny_models import served_copy


COMMON = {"engine.cpu_threads": 1, "engine.max_num_seqs": 7, "model.max_model_len": 256}
# Token-id prompts, more than one box's share of the sequences, run concurrently.
PROMPTS = [[3, 17, 42, 99, 7], [250, 1, 1, 1], [5] * 12, list(range(30, 100)), [200, 100, 50, 25, 12, 6, 3],
           list(range(200, 140, -1)), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]]


def greedy(url, prompt, max_tokens=12):
    r = requests.post(url + "/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def run_all(url, prompts=PROMPTS, max_tokens=12):
    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(lambda p: greedy(url, p, max_tokens), prompts))


# The emulated CUDA server runs the pairs on the dense tiny Qwen3.5: the hidden states
# between the boxes travel in BF16, whose rounding tips the tiny MoE models' near-uniform
# routers now and then.
@pytest.fixture(scope="module", params=["qwen3_5"] if EMULATED_GPU else ["qwen3_5_moe", "qwen3_next", "nemotron_h"])
def model(request, tmp_path_factory):
    path = served_copy(request.param, tmp_path_factory.mktemp(request.param))
    s = Server(COMMON, model=path).wait_ready()
    single = run_all(s.url)
    s.stop()
    return path, single


# The worker from layer 1 (DeltaNet layers on both boxes) or from layer 3 (the worker holds
# the attention layer only, and no state).
@pytest.mark.cuda_path
@pytest.mark.parametrize("split", ["1", "3"])
def test_hybrid_pair_matches_single_process(model, split):
    path, single = model
    addr = f"127.0.0.1:{free_port()}"
    peer = {"peer.enabled": True, "peer.transport": "tcp", "peer.head_addr": addr, "peer.timeout_s": 5.0,
            "peer.layer_split": split}
    head = Server({**COMMON, **peer, "peer.role": "head"}, model=path)
    worker = Server({**COMMON, **peer, "peer.role": "worker"}, model=path)
    try:
        head.wait_ready(120)
        got = run_all(head.url)
        second = run_all(head.url)  # the slots again, after every sequence of the first round
        worker_log = worker.output()
    finally:
        worker.stop()
        head.stop()
    assert got == single, f"split at layer {split}: pair {got!r} != single {single!r}"
    assert second == single
    assert all(len(t) > 0 for t in got)
    # 7 sequences over two micro-batch slots: 4 each, so 8 state slots on either box, and
    # 14 state checkpoints (twice engine.max_num_seqs).
    assert "the session's recurrent state: 22 slots" in worker_log
