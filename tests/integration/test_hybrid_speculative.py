"""Speculative decoding on a hybrid (the tiny Qwen3.5-MoE, Qwen3-Next and Nemotron-H, CPU backend). The
recurrent state takes in every draft a step verifies, so that step first keeps the state it
started from in the sequence's snapshot slot; when drafts are rejected, the next step restores
it and computes the accepted tokens again (Batch::state_copies). Greedy outputs with n-gram
speculation must equal those without, token for token, concurrent and one at a time, in one
process and in a pair whose head drafts (each box restoring its own layers' states), while
the metrics show drafts both kept and rolled back.
"""
import pytest

from conftest import Server, free_port, wait_engine_idle
from test_peer_hybrid import COMMON, PROMPTS, greedy, run_all
from test_serve_tiny_models import served_copy


SPECULATIVE = {"engine.speculative": "ngram", "engine.num_speculative_tokens": 4, "engine.prompt_lookup_min": 1}
# Random weights seldom repeat themselves: long answers, and prompts whose answers do now
# and then (found by trying), so that some drafts hold and most do not.
MAX_TOKENS = 100
PROMPTS = PROMPTS + [[30, 31, 32] * 20, [200] * 40, list(range(100, 160))]


@pytest.fixture(scope="module", params=["qwen3_5_moe", "qwen3_next", "nemotron_h"])
def model(request, tmp_path_factory):
    """The model, and its greedy answers without speculation."""
    path = served_copy(request.param, tmp_path_factory.mktemp(request.param))
    s = Server(COMMON, model=path).wait_ready()
    try:
        return path, run_all(s.url, PROMPTS, MAX_TOKENS)
    finally:
        s.stop()


def check_drafts(m):
    drafted, accepted = m["vllm:spec_decode_num_draft_tokens_total"], m["vllm:spec_decode_num_accepted_tokens_total"]
    assert accepted > 0, m  # drafts kept: the state went on from them
    assert drafted > accepted, m  # drafts rejected: the state came back from its snapshot


def test_speculation_on_a_hybrid_gives_the_tokens_without(model):
    path, single = model
    s = Server({**COMMON, **SPECULATIVE}, model=path).wait_ready()
    try:
        together = run_all(s.url, PROMPTS, MAX_TOKENS)
        alone = [greedy(s.url, p, MAX_TOKENS) for p in PROMPTS]  # drafts independent of timing
        m = wait_engine_idle(s.url)
    finally:
        s.stop()
    assert together == single
    assert alone == single
    check_drafts(m)


def test_pair_whose_head_drafts_gives_the_tokens_without(model):
    path, single = model
    addr = f"127.0.0.1:{free_port()}"
    peer = {"peer.enabled": True, "peer.transport": "tcp", "peer.head_addr": addr, "peer.timeout_s": 5.0,
            "peer.layer_split": "1"}
    head = Server({**COMMON, **SPECULATIVE, **peer, "peer.role": "head"}, model=path)
    worker = Server({**COMMON, **peer, "peer.role": "worker"}, model=path)
    try:
        head.wait_ready(120)
        together = run_all(head.url, PROMPTS, MAX_TOKENS)
        alone = [greedy(head.url, p, MAX_TOKENS) for p in PROMPTS]  # drafts independent of timing
        m = wait_engine_idle(head.url)
    finally:
        worker.stop()
        head.stop()
    assert together == single
    assert alone == single
    check_drafts(m)
