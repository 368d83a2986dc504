"""Speculative decoding with a draft model ([engine] speculative = "draft", speculative_model)
through the real server on the CPU backend, and the configs it must refuse.

A draft model's greedy tokens are point-mass drafts (engine/core/speculator.h), so every
answer, its logprobs and a seeded sample's text must be those of a server without
speculation, token for token. The oracle is that second server on the same model. SmolLM2
drafting for itself must also have every greedy draft accepted; the tiny Llama with the tiny
Qwen3 as its draft (random weights: most drafts are rejected) exercises the draft's KV after
rejections. The tiny Llama's Q8_0 GGUF cannot be served as a draft: its tokenizer metadata
(tests/gen/gen_loader_golden.write_gguf_model) is a loader fixture that no tokenizer loads.

Bad configs end `sparkd check` (or `sparkd serve`, which alone loads tokenizers) with exit
status 2 and a message that names the problem.
"""
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import requests

from conftest import MODEL, REPO, Server, assemble_chat_stream, model_id, run_sparkd, to_toml, wait_engine_idle
from test_peer_hybrid import PROMPTS as TOKEN_PROMPTS, greedy, run_all
from test_serve_tiny_models import served_copy

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="needs the SmolLM2 model (make model)")

TINY = REPO / "tests" / "golden" / "models"
MAX_TOKENS = 24
MAX_MODEL_LEN = 256
SMOL = {"model.max_model_len": MAX_MODEL_LEN, "engine.max_num_seqs": 8}
DRAFT = {"engine.speculative": "draft", "engine.num_speculative_tokens": 4}
PROMPTS = ["The capital of France is", "Write a haiku about the sea.",
           "Count: one, two, three, four, five, six, seven, eight, nine, ten, eleven, twelve,"]
MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]


def start_pair(model, settings, draft):
    """Servers on `model` without speculation and with `draft` as its draft model, loading
    at the same time."""
    off = Server(settings, model=model)
    on = Server({**settings, **DRAFT, "engine.speculative_model": str(draft)}, model=model)
    try:
        return off.wait_ready(), on.wait_ready()
    except BaseException:
        off.stop()
        on.stop()
        raise


@pytest.fixture(scope="module")
def smol_pair():
    off, on = start_pair(MODEL, SMOL, MODEL)
    yield off, on
    off.stop()
    on.stop()


def drafts(url):
    m = wait_engine_idle(url)
    return m.get("vllm:spec_decode_num_draft_tokens_total", 0), m.get("vllm:spec_decode_num_accepted_tokens_total", 0)


def complete(url, prompt, **extra):
    body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True, **extra}
    r = requests.post(url + "/v1/completions", timeout=300, json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    choice.pop("index", None)
    return choice


def complete_all(url, prompts, **extra):
    with ThreadPoolExecutor(len(prompts)) as pool:  # concurrent: drafts for several sequences a step
        return list(pool.map(lambda p: complete(url, p, **extra), prompts))


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def test_greedy_completions_and_logprobs_equal_those_without_drafts(smol_pair):
    """First in the module, on the fresh server: one request at a time, drafts are certain
    (the CPU backend drafts only in steps of fewer rows than rows_at_decode_cost, 4, and a
    draft model's drafts may stop where they do not pay for their time)."""
    off, on = smol_pair
    want = complete_all(off.url, PROMPTS, logprobs=2)
    for w in want:
        assert w["finish_reason"] == "length" and len(w["logprobs"]["tokens"]) == MAX_TOKENS
    before = drafts(on.url)
    assert [complete(on.url, p, logprobs=2) for p in PROMPTS] == want
    drafted, accepted = drafts(on.url)
    # The model drafting for itself, greedy: every draft holds.
    assert drafted > before[0], (before, drafted)
    assert accepted - before[1] == drafted - before[0], (before, drafted, accepted)
    assert complete_all(on.url, PROMPTS, logprobs=2) == want  # batched
    assert drafts(off.url) == (0, 0)


def test_streamed_completion_equals_the_whole_one(smol_pair):
    off, on = smol_pair
    want = complete(off.url, PROMPTS[2])["text"]
    with requests.post(on.url + "/v1/completions", timeout=300, stream=True, json={
            "prompt": PROMPTS[2], "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
            "stream": True}) as r:
        assert r.status_code == 200
        events = [line[len(b"data: "):] for line in r.iter_lines() if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    text = "".join(c["text"] for e in events[:-1] for c in json.loads(e)["choices"])
    assert text == want


def test_seeded_sample_equals_the_one_without_drafts(smol_pair):
    off, on = smol_pair
    extra = {"temperature": 0.9, "top_p": 0.95, "seed": 1234}
    assert complete(on.url, PROMPTS[1], **extra) == complete(off.url, PROMPTS[1], **extra)


def test_context_filled_to_max_model_len_equals_the_one_without_drafts(smol_pair):
    # The last steps have fewer positions left than drafts.
    off, on = smol_pair
    prompt = list(range(1000, 1000 + MAX_MODEL_LEN - MAX_TOKENS))
    want = complete(off.url, prompt, logprobs=1)
    assert want["finish_reason"] == "length"
    assert complete(on.url, prompt, logprobs=1) == want
    r = requests.post(on.url + "/v1/completions", timeout=60, json={
        "prompt": prompt, "max_tokens": MAX_TOKENS + 1, "temperature": 0})
    assert r.status_code == 400, r.text


def test_chat_greedy_and_streamed_equal_those_without_drafts(smol_pair):
    off, on = smol_pair
    args = dict(model=model_id(), messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0, logprobs=True,
                top_logprobs=2)
    want = client(off).chat.completions.create(**args).choices[0]
    got = client(on).chat.completions.create(**args).choices[0]
    assert want.message.content
    assert got.message.content == want.message.content
    assert got.logprobs.model_dump() == want.logprobs.model_dump()
    stream = client(on).chat.completions.create(**{**args, "logprobs": False, "top_logprobs": None}, stream=True)
    _, content, calls, finish = assemble_chat_stream(stream)
    assert (content, calls, finish) == (want.message.content, [], want.finish_reason)


def test_server_logs_the_draft_and_its_memory(smol_pair):
    off, on = smol_pair
    log = on.output()
    assert f"speculative decoding with the draft model {MODEL}" in log, log
    assert re.search(r"draft model\s+[\d.]+ MiB weights", log), log
    assert "draft model" not in off.output()


@pytest.mark.parametrize("target_name,draft_name", [("llama", "qwen3"), ("llama", "qwen3_5"), ("qwen3_5", "qwen3")])
def test_tiny_model_with_another_architecture_as_draft(tmp_path_factory, target_name, draft_name):
    """Both with the same 256-character tokenizer; random weights, so most drafts fail. One
    request at a time: the CPU backend drafts only while a step has fewer rows than
    rows_at_decode_cost (4). A hybrid draft (qwen3_5) takes its state back to its snapshot
    after each rejection; a hybrid model takes back its own."""
    target = served_copy(target_name, tmp_path_factory.mktemp("target"))
    draft = served_copy(draft_name, tmp_path_factory.mktemp("draft"))
    settings = {"engine.max_num_seqs": 8, "model.max_model_len": MAX_MODEL_LEN}
    off, on = start_pair(target, settings, draft)
    try:
        want = run_all(off.url, TOKEN_PROMPTS, MAX_TOKENS)
        got = [greedy(on.url, p, MAX_TOKENS) for p in TOKEN_PROMPTS]
        drafted, accepted = drafts(on.url)
    finally:
        off.stop()
        on.stop()
    assert got == want
    assert drafted > accepted, (drafted, accepted)  # rejected drafts, run again by the draft


# ---- configs that must be refused ------------------------------------------------------------

def config_file(tmp_path, settings):
    p = tmp_path / "spark.toml"
    p.write_text(to_toml({"engine.cpu_threads": 2, "server.port": 0, **settings}))
    return p


def refused(cmd, tmp_path, settings, *words):
    """`sparkd cmd --config` on `settings` exits with status 2 and a message holding `words`."""
    r = run_sparkd(cmd, "--config", config_file(tmp_path, settings), timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"sparkd {cmd}: error:" in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, f"{w!r} not in: {r.stderr}"
    assert "Aborted" not in r.stderr and "terminate" not in r.stderr
    return r.stderr


def test_draft_without_speculative_model(tmp_path):
    refused("check", tmp_path, {"model.path": str(MODEL), "engine.speculative": "draft"},
            'speculative = "draft" needs speculative_model', "spark.toml:")


def test_draft_at_a_missing_path(tmp_path):
    missing = tmp_path / "no-such-draft.gguf"
    for cmd in ("check", "serve"):
        refused(cmd, tmp_path, {"model.path": str(MODEL), **DRAFT, "engine.speculative_model": str(missing)},
                "speculative_model", str(missing), "does not exist")


def test_draft_with_more_token_ids_than_the_model(tmp_path):
    refused("check", tmp_path, {"model.path": str(TINY / "llama"), **DRAFT, "engine.speculative_model": str(MODEL)},
            "speculative_model", "49152 token ids", "the model 256", "tokenizer")


def test_draft_with_fewer_positions_than_the_context(tmp_path):
    refused("check", tmp_path, {"model.path": str(MODEL), "model.max_model_len": 2048, **DRAFT,
                                "engine.speculative_model": str(TINY / "llama")},
            "speculative_model", "256 positions", "context of 2048")


def test_draft_with_another_tokenizer(tmp_path):
    # Fewer token ids than SmolLM2 (256), so the plan passes; the texts differ from id 0.
    draft = served_copy("llama", tmp_path)
    refused("serve", tmp_path, {"model.path": str(MODEL), **SMOL, **DRAFT, "engine.speculative_model": str(draft)},
            "the draft model's tokenizer differs from the model's", "token 0 is")


def test_draft_without_a_tokenizer(tmp_path):
    refused("serve", tmp_path, {"model.path": str(MODEL), **SMOL, **DRAFT,
                                "engine.speculative_model": str(TINY / "llama")},
            "speculative_model", str(TINY / "llama"), "tokenizer")


# ---- the memory plan -------------------------------------------------------------------------

def plan_line(out, name):
    m = re.search(rf"^  {name}\s+(.*)$", out, re.M)
    assert m, out
    return m.group(1)


def test_check_prints_the_draft_models_memory(tmp_path):
    """SmolLM2 with the tiny Llama as draft, named relative to the config file: the draft's
    weights as `sparkd check` plans them for the draft alone, its K and V bytes per token from
    its config.json, and the model's blocks that much larger."""
    draft = TINY / "llama"
    settings = {"model.path": str(MODEL), **SMOL, **DRAFT, "engine.speculative_model": os.path.relpath(draft, tmp_path)}
    r = run_sparkd("check", "--config", config_file(tmp_path, settings))
    assert r.returncode == 0, r.stdout + r.stderr
    alone = run_sparkd("check", "--model", draft)
    assert alone.returncode == 0, alone.stderr
    without = run_sparkd("check", "--config", config_file(tmp_path, {"model.path": str(MODEL), **SMOL}))
    assert without.returncode == 0, without.stderr
    assert "draft model" not in without.stdout

    cfg = json.loads((draft / "config.json").read_text())
    kv = re.match(r"f32, (\d+) bytes/token, ([\d.]+) KiB per block of 16 tokens", plan_line(r.stdout, "kv cache dtype"))
    assert kv, r.stdout
    draft_kv = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 4  # K and V in f32
    line = plan_line(r.stdout, "draft model")
    assert line.startswith(plan_line(alone.stdout, "weights") + " weights, "), (line, alone.stdout)
    assert line.endswith(f", {draft_kv} bytes/token of K and V in every block beside the model's"), line
    assert float(kv.group(2)) == (int(kv.group(1)) + draft_kv) * 16 / 1024
    assert plan_line(without.stdout, "kv cache dtype").startswith(f"f32, {kv.group(1)} bytes/token, ")
