"""Speculative decoding across a head and a worker over loopback TCP (CPU backend).

The head drafts by prompt lookup, both processes compute the verification rows, the
worker's samples decide which drafts hold, and both roll back the same KV: the pair's
greedy outputs must equal a single process's without speculation, token for token, while
the head's /metrics shows drafts accepted and rejected, and every KV block is free after.
"""
import pytest

from conftest import MODEL, Server, metrics, wait_engine_idle
from test_peer import COMMON, Pair, run_all

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="needs the SmolLM2 model (make model)")

# Prompts the model answers by quoting: lists to repeat, text to copy. And a few that are not.
PROMPTS = [
    "Repeat this list exactly, one item per line:\napple\nbanana\ncherry\napple\nbanana\ncherry\n",
    "Copy the sentence twice: The quick brown fox jumps over the lazy dog. The quick brown fox",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Count: one, two, three, one, two, three, one, two,",
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3,",
    "Name three colors.",
]

SPECULATIVE = {"engine.speculative": "ngram", "engine.num_speculative_tokens": 4, "engine.prompt_lookup_min": 1}


@pytest.fixture(scope="module")
def single_off():
    with Server(COMMON) as s:
        yield s.wait_ready()


def test_pair_with_speculation_matches_single_process_without(single_off):
    pair = Pair(head=SPECULATIVE).wait_ready()
    try:
        expected, _, _ = run_all(single_off.url, PROMPTS, max_tokens=40)
        # One at a time (a step of one sequence stays within the CPU's row budget, so it
        # drafts), then all at once.
        got_alone = [run_all(pair.head.url, [p], max_tokens=40)[0][0] for p in PROMPTS]
        got_batched, _, _ = run_all(pair.head.url, PROMPTS, max_tokens=40)
        for p, e, a, b in zip(PROMPTS, expected, got_alone, got_batched):
            assert a == e, f"{p!r}: pair alone {a!r} != single {e!r}"
            assert b == e, f"{p!r}: pair batched {b!r} != single {e!r}"
        m = wait_engine_idle(pair.head.url)
        assert m["vllm:spec_decode_num_draft_tokens_total"] > 0
        assert 0 < m["vllm:spec_decode_num_accepted_tokens_total"] < m["vllm:spec_decode_num_draft_tokens_total"]
        assert m["sparkd_kv_blocks_used"] == 0
    finally:
        pair.stop()


def test_pair_with_a_draft_model_matches_single_process_without(single_off):
    # The head runs the draft model (here the model itself, on the head's CPU): the worker
    # sees only verification rows, as with lookup drafts.
    draft = {"engine.speculative": "draft", "engine.speculative_model": str(MODEL), "engine.num_speculative_tokens": 3}
    pair = Pair(head=draft).wait_ready()
    try:
        expected, _, _ = run_all(single_off.url, PROMPTS[:4], max_tokens=24)
        got = [run_all(pair.head.url, [p], max_tokens=24)[0][0] for p in PROMPTS[:4]]
        assert got == expected
        m = wait_engine_idle(pair.head.url)
        assert m["vllm:spec_decode_num_draft_tokens_total"] > 0
        assert m["sparkd_kv_blocks_used"] == 0
    finally:
        pair.stop()
