"""Peer mode keeps gpt-oss's sliding layers to their window blocks too: the tiny gpt-oss
(window 8, blocks of 4) split between a head (layers 0-1) and a worker (layers 2-3) over
loopback TCP, each box's sliding layers holding 12 blocks (48 tokens), serves two
250-token sequences at once with the tokens and logprobs of a single server that keeps
every layer for every block. Blocks behind a window move to full-only blocks on both
boxes: the head's step carries the copies (Batch::block_copies) to the worker.
"""
import re
from concurrent.futures import ThreadPoolExecutor

import random

from conftest import Server, free_port
from test_sliding_kv import BLOCK, LARGE, SMALL, close, complete, model_dir, prompt, window_blocks_needed


def test_pair_with_window_blocks_matches_single_server(tmp_path_factory):
    d = model_dir(tmp_path_factory, "gpt_oss")
    addr = f"127.0.0.1:{free_port()}"
    peer = {"peer.enabled": True, "peer.transport": "tcp", "peer.head_addr": addr, "peer.timeout_s": 10.0,
            "peer.layer_split": "2"}
    rng = random.Random(3)
    prompts = [prompt(rng, 200, 256), prompt(rng, 210, 256)]
    with Server(model=d, settings=LARGE) as single:
        single.wait_ready()
        want = [complete(single, ids, 250 - len(ids)) for ids in prompts]
    head = Server(model=d, settings={**SMALL, **peer, "peer.role": "head"})
    worker = Server(model=d, settings={**SMALL, **peer, "peer.role": "worker"})
    try:
        head.wait_ready(120)
        m = re.search(r"sliding layers +1 of 2 see the last 8 tokens and hold (\d+) of the", head.output())
        used = re.search(r"kv blocks used +(\d+)", head.output())
        assert m and used, head.output()
        window_blocks, blocks = int(m.group(1)), int(used.group(1))
        assert window_blocks == window_blocks_needed(2, 16) and window_blocks * BLOCK < 250 <= blocks * BLOCK
        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(lambda ids: complete(head, ids, 250 - len(ids)), prompts))
        worker_log = worker.output()
    finally:
        worker.stop()
        head.stop()
    for g, w in zip(got, want):
        assert len(g[0]) == len(w[0])
        close(g, w, 1e-3)
    # The worker took the session's cache: the sliding layer it holds keeps the window blocks.
    m = re.search(r"the session's KV cache: (\d+) blocks, (\d+) of them in every layer", worker_log)
    assert m and (int(m.group(1)), int(m.group(2))) == (blocks, window_blocks), worker_log
