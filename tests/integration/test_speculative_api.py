"""Speculative decoding through the HTTP API: the same text with and without it, the
per-request opt-out, the vLLM spec-decode metrics, and `sparkd bench --compare-speculative`.
"""
import re

import pytest
import requests

from conftest import MODEL, Server, metrics, run_sparkd, wait_engine_idle

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="needs the SmolLM2 model (make model)")

SETTINGS = {"engine.cpu_threads": 1, "engine.speculative": "ngram", "engine.prompt_lookup_min": 1}
PROMPT = "Repeat exactly: red green blue, red green blue, red green blue, red green"


@pytest.fixture(scope="module")
def spec_server():
    with Server(SETTINGS) as s:
        yield s.wait_ready()


def complete(url, **extra):
    r = requests.post(url + "/v1/completions", timeout=300,
                      json={"prompt": PROMPT, "max_tokens": 32, "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def drafted(url):
    return wait_engine_idle(url).get("vllm:spec_decode_num_draft_tokens_total", 0)


def test_opt_out_gives_the_same_text_without_drafts(spec_server):
    url = spec_server.url
    before = drafted(url)
    off = complete(url, speculative=False)
    assert drafted(url) == before  # the opted-out request drafted nothing
    on = complete(url)
    assert on == off
    m = metrics(url)
    assert m["vllm:spec_decode_num_draft_tokens_total"] > before
    assert m["vllm:spec_decode_num_accepted_tokens_total"] > 0
    assert m["vllm:spec_decode_num_drafts_total"] > 0
    r = requests.post(url + "/v1/completions", timeout=60, json={"prompt": "x", "max_tokens": 2, "speculative": "no"})
    assert r.status_code == 400 and "speculative" in r.text


def test_bench_compares_on_and_off(spec_server):
    r = run_sparkd("bench", "--url", spec_server.url, "--compare-speculative", "--num-prompts", "2", "--input-len",
                   "32", "--output-len", "16", timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "speculative decoding: on vs off" in out
    assert re.search(r"output token throughput\s+[\d.]+\s+[\d.]+\s+[\d.]+x", out), out
    assert re.search(r"acceptance rate\s+[\d.]+", out), out
    assert re.search(r"mean accepted length\s+[\d.]+", out), out
    # Each side sent every prompt twice.
    assert re.search(r"output tokens\s+64\s+64", out), out
