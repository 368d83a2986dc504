"""Speculative decoding with Gemma 4's assistant ([engine] speculative = "draft",
speculative_model = the assistant's checkpoint) through the real server on the CPU backend
(and the emulated CUDA one: the tests marked cuda_path), and the pairings it must refuse.

The fixtures are the tiny Gemma 4 (tests/gen/gen_gemma4.py) and a tiny random assistant made
for it (tests/gen/gen_gemma4_assistant.py): the assistant reads the model's embedding, final
hidden state and the K and V of its last sliding and last full layer. Its random drafts
mostly fail, which exercises rejected drafts; being point masses, they leave every answer,
greedy or seeded, and its logprobs exactly those of a server without speculation, the
oracle. The assistant's own logits are checked against transformers in the unit tests
(test_cpu_forward.cpp).
"""
import json
import re
import shutil
import struct

import pytest
import requests

from conftest import Server
from test_mtp_head import drafts, refused
from test_serve_tiny_models import MODELS, served_copy

MAX_TOKENS = 24
SETTINGS = {"engine.max_num_seqs": 8, "model.max_model_len": 256}
# Token ids of the tiny Gemma 4's vocabulary (128); the longer ones pass its window of 8.
PROMPTS = [[3, 17, 42, 99, 7], [50, 1, 1, 1], [5] * 12, list(range(30, 100)), [120, 100, 50, 25, 12, 6, 3],
           list(range(127, 87, -1)), [9, 8, 7, 6, 5, 4, 3, 2]]


def assistant_settings(path=MODELS / "gemma4_assistant"):
    return {"engine.speculative": "draft", "engine.speculative_model": str(path), "engine.num_speculative_tokens": 3}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    model = served_copy("gemma4", tmp_path_factory.mktemp("assistant"))
    off = Server(SETTINGS, model=model)
    on = Server({**SETTINGS, **assistant_settings()}, model=model)
    try:
        yield off.wait_ready(), on.wait_ready()
    finally:
        off.stop()
        on.stop()


def completion(url, prompt, **sampling):
    r = requests.post(url + "/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": MAX_TOKENS, "ignore_eos": True, "logprobs": 2, "temperature": 0, **sampling})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["text"], choice["logprobs"]


@pytest.mark.cuda_path
def test_greedy_and_seeded_answers_and_logprobs_equal_those_without_drafts(pair):
    """One request at a time (the CPU backend drafts while a step holds fewer rows than
    rows_at_decode_cost). The random assistant's drafts mostly fail, so the draft cost model
    soon stops them (Speculator::observe_step); the first ones are made and verified."""
    off, on = pair
    for sampling in ({}, {"temperature": 0.8, "seed": 7}):
        want = [completion(off.url, p, **sampling) for p in PROMPTS]
        got = [completion(on.url, p, **sampling) for p in PROMPTS]
        assert got == want, sampling
    drafted, accepted = drafts(on.url)
    assert drafted > 0
    assert drafted > accepted


@pytest.mark.cuda_path
def test_concurrent_answers_equal_those_without_drafts(pair):
    from test_peer_hybrid import run_all
    off, on = pair
    assert run_all(on.url, PROMPTS, MAX_TOKENS) == run_all(off.url, PROMPTS, MAX_TOKENS)


@pytest.mark.cuda_path
def test_server_logs_the_assistant_and_its_memory(pair):
    off, on = pair
    log = on.output()
    assert "speculative decoding with Gemma 4's assistant" in log, log
    # It keeps no K and V of its own: the model's are read in place.
    assert re.search(r"draft model\s+[\d.]+ KiB weights", log), log
    assert "speculative decoding" not in off.output()


# ---- pairings that must be refused (`sparkd check`, exit status 2) ---------------------------

def test_an_assistant_for_another_model_is_refused(tmp_path):
    # The MoE model's full layers hold 2 KV heads; the assistant reads 1.
    model = served_copy("gemma4_moe", tmp_path)
    refused(tmp_path, {**SETTINGS, "model.path": str(model), **assistant_settings()}, "engine.speculative_model",
            "Gemma 4's assistant", "layer 3 reads 1 KV heads of 32 values", "the model's layer 3 holds 2 of 32")
    # A model of another vocabulary.
    llama = served_copy("llama", tmp_path)
    refused(tmp_path, {**SETTINGS, "model.path": str(llama), **assistant_settings()}, "has 128 token ids, the model 256")


def assistant_copy(tmp_path, edit_config=None):
    d = tmp_path / "assistant"
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(MODELS / "gemma4_assistant", d)
    if edit_config:
        c = json.loads((d / "config.json").read_text())
        edit_config(c)
        (d / "config.json").write_text(json.dumps(c))
    return d


def set_int64(path, name, index, value):
    """Overwrites element `index` of the I64 tensor `name` of a safetensors file in place."""
    data = bytearray(path.read_bytes())
    (header_len,) = struct.unpack_from("<Q", data, 0)
    entry = json.loads(data[8:8 + header_len])[name]
    assert entry["dtype"] == "I64"
    struct.pack_into("<q", data, 8 + header_len + entry["data_offsets"][0] + 8 * index, value)
    path.write_bytes(bytes(data))


def test_hostile_assistant_files_are_refused(tmp_path):
    model = served_copy("gemma4", tmp_path)
    base = {**SETTINGS, "model.path": str(model)}

    def not_all_shared(c):
        c["text_config"]["num_kv_shared_layers"] = 2
    refused(tmp_path, {**base, **assistant_settings(assistant_copy(tmp_path, not_all_shared))},
            "num_kv_shared_layers", "every layer of an assistant reads the model's K and V")

    def centroids_not_dividing(c):
        c["num_centroids"] = 12
    refused(tmp_path, {**base, **assistant_settings(assistant_copy(tmp_path, centroids_not_dividing))},
            "num_centroids", "must divide vocab_size")


def test_a_token_ordering_that_is_no_permutation_is_refused(tmp_path):
    """Read when the assistant is loaded: the server refuses to start, naming the tensor."""
    model = served_copy("gemma4", tmp_path)
    bad = assistant_copy(tmp_path)
    set_int64(bad / "model.safetensors", "masked_embedding.token_ordering", 5, 200)
    server = Server({**SETTINGS, **assistant_settings(bad)}, model=model)
    try:
        code = server.proc.wait(timeout=120)
        log = server.output()
    finally:
        server.stop()
    assert code == 2, log
    assert "masked_embedding.token_ordering must list every token id below 128 once; entry 5 is 200" in log, log
    assert "Aborted" not in log and "terminate" not in log
