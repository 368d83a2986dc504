"""Speculative decoding with the model's own MTP head ([engine] speculative = "mtp") through
the real server on the CPU backend, and the configs it must refuse.

The fixture is the tiny Qwen3.5-MoE with a random MTP layer (tests/gen/gen_qwen3_5_mtp.py):
its drafts mostly fail, which exercises the head's rows after rejections and the model's
recurrent state rolled back, while the head's drafts, being point masses, leave every
greedy answer and its logprobs exactly those of a server without speculation, the oracle.
The head's own logits are checked against numpy in the unit tests (test_cpu_forward.cpp).
"""
import json
import re

import pytest
import requests

import golden_gguf
from conftest import Server, run_sparkd, to_toml, wait_engine_idle
from test_hybrid_hostile import gguf_copy
from test_peer_hybrid import PROMPTS, greedy, run_all
from test_serve_tiny_models import served_copy

MAX_TOKENS = 24
SETTINGS = {"engine.max_num_seqs": 8, "model.max_model_len": 256}
MTP = {"engine.speculative": "mtp", "engine.num_speculative_tokens": 3}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    model = served_copy("qwen3_5_moe_mtp", tmp_path_factory.mktemp("mtp"))
    off = Server(SETTINGS, model=model)
    on = Server({**SETTINGS, **MTP}, model=model)
    try:
        yield off.wait_ready(), on.wait_ready()
    finally:
        off.stop()
        on.stop()


def drafts(url):
    m = wait_engine_idle(url)
    return m.get("vllm:spec_decode_num_draft_tokens_total", 0), m.get("vllm:spec_decode_num_accepted_tokens_total", 0)


def completion(url, prompt):
    r = requests.post(url + "/v1/completions", timeout=300, json={
        "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, "logprobs": 2})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["text"], choice["logprobs"]


@pytest.mark.cuda_path
def test_greedy_answers_and_logprobs_equal_those_without_drafts(pair):
    """One request at a time: the CPU backend drafts only while a step holds fewer rows
    than rows_at_decode_cost (4). The random head's drafts fail, so the draft cost model
    soon stops them (Speculator::observe_step); the first ones are made and verified."""
    off, on = pair
    want = [completion(off.url, p) for p in PROMPTS]
    got = [completion(on.url, p) for p in PROMPTS]
    assert got == want
    drafted, accepted = drafts(on.url)
    assert drafted > 0
    assert drafted > accepted  # rejected drafts: the head's rows are run again on the model's states


@pytest.mark.cuda_path
def test_concurrent_answers_equal_those_without_drafts(pair):
    off, on = pair
    assert run_all(on.url, PROMPTS, MAX_TOKENS) == run_all(off.url, PROMPTS, MAX_TOKENS)


def served_with_and_without_the_head(model, concurrent=False):
    """`model` served with and without its head: the answers to PROMPTS[:4] (and all PROMPTS
    at once, with `concurrent`) of each, the drafts made, and the log of the one drafting."""
    off = Server(SETTINGS, model=model)
    on = Server({**SETTINGS, **MTP}, model=model)
    try:
        off.wait_ready()
        on.wait_ready()
        want = [completion(off.url, p) for p in PROMPTS[:4]]
        got = [completion(on.url, p) for p in PROMPTS[:4]]
        drafted, _ = drafts(on.url)
        if concurrent:
            assert run_all(on.url, PROMPTS, MAX_TOKENS) == run_all(off.url, PROMPTS, MAX_TOKENS)
        return want, got, drafted, on.output()
    finally:
        off.stop()
        on.stop()


def test_a_gguf_head_drafts_and_changes_nothing():
    """The same model as llama.cpp's converter writes it (tests/gen/golden_gguf.py): the head
    is the block after the layers (block_count counts it, nextn_predict_layers = 1), its own
    parts under nextn.*. Drafts are made and verified, and every answer and its logprobs
    are those of the same file served without them."""
    want, got, drafted, log = served_with_and_without_the_head(golden_gguf.path("qwen3_5_moe_mtp.gguf"), True)
    assert got == want
    assert drafted > 0
    assert "speculative decoding with the model's MTP head" in log, log


@pytest.mark.cuda_path
def test_qwen3_next_head_drafts_and_changes_nothing(tmp_path):
    """Qwen3-Next's head (the tiny Qwen3-Next with a random mtp.*, written at test time by
    tests/gen/gen_qwen3_5_mtp.py; its config names no head count, read as 1): drafts are
    made and verified, and every answer and its logprobs equal the same folder served
    without them."""
    model = served_copy("qwen3_next_mtp", tmp_path, src=golden_gguf.path("qwen3_next_mtp"))
    want, got, drafted, log = served_with_and_without_the_head(model)
    assert got == want
    assert drafted > 0
    assert "speculative decoding with the model's MTP head (Qwen3NextForCausalLM (MTP head)" in log, log


@pytest.mark.cuda_path
def test_nemotron_super_head_drafts_and_changes_nothing(tmp_path):
    """Nemotron-3-Super's head (the tiny Nemotron-H with LatentMoE and a random "*E" head,
    tests/gen/gen_nemotron_h_mtp.py): an attention block with its own K and V, then an MoE
    block, over the hybrid's Mamba-2 states rolled back after rejections."""
    model = served_copy("nemotron_h_mtp", tmp_path, src=golden_gguf.path("nemotron_h_mtp"))
    want, got, drafted, log = served_with_and_without_the_head(model, True)
    assert got == want
    assert drafted > 0
    assert "speculative decoding with the model's MTP head (NemotronHForCausalLM (MTP head)" in log, log


def nemotron_head_with(tmp_path, **keys):
    """The tiny Nemotron-H with its head, the head's pattern replaced by `keys`."""
    model = served_copy("nemotron_h_mtp", tmp_path, src=golden_gguf.path("nemotron_h_mtp"))
    config = json.loads((model / "config.json").read_text())
    config.pop("mtp_hybrid_override_pattern")
    (model / "config.json").write_text(json.dumps({**config, **keys}))
    return model


@pytest.mark.parametrize("keys", [{}, {"mtp_layers_block_type": ["full_attention", "moe"]}])
def test_nemotron_head_named_as_transformers_5_names_it(tmp_path, keys):
    """transformers 5 writes the head's blocks as mtp_layers_block_type, and reads a config
    naming none as attention then MoE."""
    model = nemotron_head_with(tmp_path, **keys)
    p = tmp_path / "spark.toml"
    p.write_text(to_toml({"engine.cpu_threads": 2, "server.port": 0, "model.path": str(model), **SETTINGS, **MTP}))
    r = run_sparkd("check", "--config", p, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # Its one attention block's K and V in f32: 2 x 2 kv heads x head_dim 16 x 4 bytes a token.
    assert re.search(r"^  draft model\s+.* weights, .*, 256 bytes/token of K and V in every block", r.stdout, re.M), r.stdout


@pytest.mark.parametrize("keys, words", [
    ({"mtp_hybrid_override_pattern": "*M"},
     ["mtp_hybrid_override_pattern", "has 'M' at block 1; an MTP block is * (attention), - (MLP) or E (MoE)"]),
    ({"mtp_hybrid_override_pattern": ""}, ["mtp_hybrid_override_pattern", "has 0 blocks; an MTP head has 1 to 16"]),
    ({"mtp_layers_block_type": ["attention", "mamba"]}, ["mtp_layers_block_type", "has 'M' at block 1"]),
    ({"mtp_layers_block_type": ["attention", "conv"]}, ["mtp_layers_block_type", 'holds "conv"']),
])
def test_nemotron_head_patterns_it_cannot_run(tmp_path, keys, words):
    refused(tmp_path, {"model.path": str(nemotron_head_with(tmp_path, **keys)), **MTP}, *words)


def test_mtp_on_a_qwen3_next_without_a_head(tmp_path):
    model = served_copy("qwen3_next", tmp_path)
    refused(tmp_path, {"model.path": str(model), **MTP}, 'speculative = "mtp"', "holds no MTP head tensors (mtp.*)")


def test_server_logs_the_mtp_head(pair):
    off, on = pair
    log = on.output()
    assert "speculative decoding with the model's MTP head" in log, log
    assert re.search(r"draft model\s+[\d.]+ KiB weights", log), log
    assert "speculative decoding" not in off.output()


# ---- configs that must be refused ------------------------------------------------------------

def refused(tmp_path, settings, *words):
    p = tmp_path / "spark.toml"
    p.write_text(to_toml({"engine.cpu_threads": 2, "server.port": 0, **settings}))
    r = run_sparkd("check", "--config", p, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    for w in words:
        assert w in r.stderr, f"{w!r} not in: {r.stderr}"
    assert "Aborted" not in r.stderr and "terminate" not in r.stderr


def test_mtp_on_a_model_without_a_head(tmp_path):
    model = served_copy("qwen3_5_moe", tmp_path)
    refused(tmp_path, {"model.path": str(model), **MTP}, 'speculative = "mtp"', "has no MTP head",
            "mtp_num_hidden_layers")


def test_mtp_on_a_gguf_without_a_head(tmp_path):
    refused(tmp_path, {"model.path": str(golden_gguf.path("qwen3_5_moe.gguf")), **MTP}, 'speculative = "mtp"',
            "has no MTP head", "nextn_predict_layers")


def test_gguf_heads_that_disagree_with_the_model_are_refused(tmp_path):
    """The head's block in llama.cpp's layout with a part of the wrong shape, or one left out."""
    mtp = {"source": "qwen3_5_moe_mtp.gguf", "arch": "qwen35moe"}
    bad = gguf_copy(tmp_path, {"blk.4.nextn.eh_proj.weight": lambda a: a[:, :96]}, **mtp)
    refused(tmp_path, {"model.path": str(bad), **MTP}, "mtp.fc.weight", "(MTP head)")
    bad = gguf_copy(tmp_path, {"blk.4.nextn.enorm.weight": None}, **mtp)
    refused(tmp_path, {"model.path": str(bad), **MTP}, "mtp.pre_fc_norm_embedding.weight", "(MTP head)")


def test_mtp_head_named_by_the_config_but_missing_from_the_files(tmp_path):
    model = served_copy("qwen3_5_moe", tmp_path)
    config = json.loads((model / "config.json").read_text())
    config["text_config"]["mtp_num_hidden_layers"] = 1
    (model / "config.json").write_text(json.dumps(config))
    refused(tmp_path, {"model.path": str(model), **MTP}, 'speculative = "mtp"', "no MTP head tensors (mtp.*)",
            "mtp_num_hidden_layers")


def test_mtp_with_a_draft_model_named(tmp_path):
    model = served_copy("qwen3_5_moe_mtp", tmp_path)
    refused(tmp_path, {"model.path": str(model), **MTP, "engine.speculative_model": str(model)},
            "speculative_model", 'only speculative = "draft"')


def test_check_prints_the_heads_memory(tmp_path):
    model = served_copy("qwen3_5_moe_mtp", tmp_path)
    p = tmp_path / "spark.toml"
    p.write_text(to_toml({"engine.cpu_threads": 2, "server.port": 0, "model.path": str(model), **SETTINGS, **MTP}))
    r = run_sparkd("check", "--config", p, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # One attention layer's K and V in f32: 2 x kv heads x head_dim x 4 bytes a token.
    c = json.loads((model / "config.json").read_text())["text_config"]
    kv = 2 * c["num_key_value_heads"] * c["head_dim"] * 4
    assert re.search(rf"^  draft model\s+.* weights, .*, {kv} bytes/token of K and V in every block", r.stdout, re.M), r.stdout


def test_pair_with_the_mtp_head_on_the_head_box(pair, tmp_path):
    """Peer mode: the head box runs the MTP head, the worker's last stage returns the
    model's hidden states with its samples, and the answers stay those of one process
    without drafts."""
    from test_peer import Pair
    off, _ = pair
    model = served_copy("qwen3_5_moe_mtp", tmp_path)
    settings = {**SETTINGS, "model.path": str(model)}
    two = Pair(head={**settings, **MTP}, worker=settings, worker_model=model).wait_ready()
    try:
        got = [greedy(two.head.url, p, MAX_TOKENS) for p in PROMPTS[:4]]
        drafted, _ = drafts(two.head.url)
        log = two.head.output()
    finally:
        two.stop()
    assert got == [greedy(off.url, p, MAX_TOKENS) for p in PROMPTS[:4]]
    assert drafted > 0
    assert "speculative decoding with the model's MTP head" in log
