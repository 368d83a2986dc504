"""Several models in one sparkd ([[models]]): the SmolLM2 chat model, the tiny Qwen3 embedder
and the tiny Qwen3 reranker served from one config, one memory plan for the box.

Each request reaches the model its body names (or, naming none, the first model whose role fits
the route); the embedder's vector and the reranker's score are checked against transformers'
(tests/golden/models/*/golden.json) while a chat stream runs beside them.
"""
import concurrent.futures
import json
import re
import time
import subprocess

import numpy as np
import openai
import pytest
import requests

from conftest import MODEL, REPO, SPARKD, Server, free_port, run_sparkd

MODELS = REPO / "tests" / "golden" / "models"
EMBED = MODELS / "qwen3_embed"
RERANK = MODELS / "qwen3_rerank"
GOLDEN_EMBED = json.loads((EMBED / "golden.json").read_text())
GOLDEN_RERANK = json.loads((RERANK / "golden.json").read_text())
TOL = 1e-4  # f32 on the CPU, as test_pooling_serve.py
NAMES = ["chat", "emb", "rr"]


def config_text(port, shares=None):
    """The three models as [[models]] tables; `shares` maps a model's name to its memory_share."""
    share = {n: f"memory_share = {(shares or {})[n]!r}\n" if n in (shares or {}) else "" for n in NAMES}
    return (f'[server]\nhost = "127.0.0.1"\nport = {port}\n'
            f"[engine]\ncpu_threads = 2\nmax_num_seqs = 4\n"
            f'[[models]]\npath = "{MODEL}"\nname = "chat"\nmax_model_len = 512\n{share["chat"]}'
            f'[[models]]\npath = "{EMBED}"\nname = "emb"\nrole = "embed"\nmax_model_len = 512\n{share["emb"]}'
            f'[[models]]\npath = "{RERANK}"\nname = "rr"\nrole = "rerank"\nmax_model_len = 512\n{share["rr"]}')


class MultiServer(Server):
    """conftest's Server with a config text of its own (to_toml writes one table per section)."""

    def __init__(self, shares=None):  # noqa: super().__init__ would write its own config
        import tempfile
        from pathlib import Path
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sparkd-multi-"))
        self.config = self.dir / "spark.toml"
        self.config.write_text(config_text(self.port, shares))
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "sparkd.log", "w+")
        self.proc = subprocess.Popen([str(SPARKD), "serve", "--config", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def multi():
    s = MultiServer()
    try:
        yield s.wait_ready()
    finally:
        log = s.output()
        # SIGTERM drains and stops every engine: a clean exit.
        assert s.stop() == 0, log


def test_three_models_answer_at_once(multi):
    client = openai.OpenAI(base_url=multi.url + "/v1", api_key="none")
    text, want = GOLDEN_EMBED["texts"][0], GOLDEN_EMBED["embeddings"][0]
    case = GOLDEN_RERANK["cases"][0]

    def chat():
        stream = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "Say hi"}],
                                                max_tokens=12, temperature=0, stream=True)
        chunks = list(stream)
        return {c.model for c in chunks}, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    def embed():
        r = client.embeddings.create(model="emb", input=[text])
        return r.model, r.data[0].embedding

    def rerank():
        return requests.post(multi.url + "/v1/rerank", timeout=60,
                             json={"model": "rr", "query": case["query"], "documents": [case["document"]],
                                   "instruction": case["instruction"]})

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(f) for f in (chat, embed, rerank)]
        (chat_models, content), (embed_model, vector), reranked = [f.result(timeout=120) for f in futures]
    assert chat_models == {"chat"} and content
    assert embed_model == "emb"
    got = np.asarray(vector, dtype=np.float64)
    assert got.shape == (len(want),)
    assert np.max(np.abs(got - np.asarray(want))) < TOL
    assert reranked.status_code == 200, reranked.text
    assert reranked.json()["model"] == "rr"
    assert abs(reranked.json()["results"][0]["relevance_score"] - case["score"]) < TOL
    assert reranked.json()["usage"]["prompt_tokens"] == len(case["ids"])


def test_models_lists_every_model(multi):
    r = requests.get(multi.url + "/v1/models", timeout=10)
    assert r.status_code == 200
    data = r.json()["data"]
    assert [m["id"] for m in data] == NAMES
    assert all(m["object"] == "model" and m["max_model_len"] == 512 for m in data)
    # The SDK reads the list as it reads OpenAI's.
    assert [m.id for m in openai.OpenAI(base_url=multi.url + "/v1", api_key="none").models.list()] == NAMES


def test_the_dashboard_stacks_every_model_against_the_box(multi):
    deadline = time.monotonic() + 10
    while True:  # the sampler's first point comes a second after start
        snap = requests.get(multi.url + "/api/snapshot", timeout=10).json()
        if snap["series"].get("t") or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    models = snap["server"]["models"]
    assert [(m["name"], m["role"]) for m in models] == list(zip(NAMES, ["chat", "embed", "rerank"]))
    assert all(m["weights_bytes"] > 0 and m["kv_bytes"] > 0 for m in models)
    series = snap["series"]
    # The chart's weights and KV are every model's, and the stack is the box's total.
    assert series["mem_weights"][-1] == sum(m["weights_bytes"] for m in models)
    assert series["mem_kv"][-1] == sum(m["kv_bytes"] for m in models)
    total = series["mem_weights"][-1] + series["mem_kv"][-1] + series["mem_state"][-1] + series["mem_other"][-1] + \
        series["mem_free"][-1]
    meminfo = dict(line.split(":", 1) for line in open("/proc/meminfo").read().splitlines())
    assert total == int(meminfo["MemTotal"].split()[0]) * 1024


def test_the_dashboard_shows_each_models_work(multi):
    before = requests.get(multi.url + "/api/snapshot", timeout=10).json()["live"]["models"]
    assert [(m["name"], m["role"]) for m in before] == list(zip(NAMES, ["chat", "embed", "rerank"]))
    r = requests.post(multi.url + "/v1/embeddings", json={"model": "emb", "input": ["a b", "c"]}, timeout=60)
    assert r.status_code == 200, r.text
    old = {m["name"]: m for m in before}
    deadline = time.monotonic() + 10
    while True:  # the engine counts a request when its step ends, as the answer goes out
        after = {m["name"]: m for m in requests.get(multi.url + "/api/snapshot", timeout=10).json()["live"]["models"]}
        if after["emb"]["finished"] >= old["emb"]["finished"] + 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert after["emb"]["finished"] == old["emb"]["finished"] + 2
    assert after["emb"]["prompt_tokens"] == old["emb"]["prompt_tokens"] + r.json()["usage"]["prompt_tokens"]
    assert after["rr"]["finished"] == old["rr"]["finished"] and after["chat"]["finished"] == old["chat"]["finished"]


def test_a_body_without_model_goes_to_the_first_of_its_role(multi):
    r = requests.post(multi.url + "/v1/embeddings", json={"input": GOLDEN_EMBED["texts"][1]}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "emb"
    assert np.max(np.abs(np.asarray(r.json()["data"][0]["embedding"]) - GOLDEN_EMBED["embeddings"][1])) < TOL
    r = requests.post(multi.url + "/v1/score", json={"text_1": "a", "text_2": "b"}, timeout=60)
    assert r.status_code == 200, r.text
    r = requests.post(multi.url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "chat"


def test_unknown_model_is_404_listing_the_served_names(multi):
    for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}),
                       ("/v1/embeddings", {"input": "x"}), ("/v1/rerank", {"query": "q", "documents": ["d"]})):
        r = requests.post(multi.url + path, json={"model": "nope", **body}, timeout=10)
        assert r.status_code == 404, r.text
        err = r.json()["error"]
        assert err["code"] == "model_not_found"
        assert "'nope'" in err["message"] and all(f"'{n}'" in err["message"] for n in NAMES)
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=multi.url + "/v1", api_key="none").embeddings.create(model="nope", input="x")


def test_a_route_naming_a_model_of_another_role_is_400(multi):
    r = requests.post(multi.url + "/v1/chat/completions", timeout=10,
                      json={"model": "emb", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400, r.text
    assert "emb" in r.json()["error"]["message"]
    r = requests.post(multi.url + "/v1/embeddings", json={"model": "chat", "input": "x"}, timeout=10)
    assert r.status_code == 400, r.text
    r = requests.post(multi.url + "/v1/rerank", json={"model": "emb", "query": "q", "documents": ["d"]}, timeout=10)
    assert r.status_code == 400, r.text


def test_health_and_metrics_cover_every_model(multi):
    assert requests.get(multi.url + "/health", timeout=5).status_code == 200
    text = requests.get(multi.url + "/metrics", timeout=10).text
    # Prometheus' rules: each family described once, its samples together right after it.
    helps = re.findall(r"^# HELP (\S+)", text, re.M)
    types = re.findall(r"^# TYPE (\S+)", text, re.M)
    assert len(helps) == len(set(helps)) and helps == types
    family, seen = None, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
            seen.add(family)
        elif not line.startswith("#"):
            name = line.split("{", 1)[0]
            assert name == family or name.rsplit("_", 1)[0] == family, line  # _total, _bucket, _sum, _count
    # model_name comes first; the replica label follows it.
    running = re.findall(r'^vllm:num_requests_running\{model_name="([^"]+)"[,}]', text, re.M)
    assert running == NAMES
    assert set(re.findall(r'^sparkd_ready\{model_name="([^"]+)"[^}]*\} 1$', text, re.M)) == set(NAMES)
    # The embedder's prompt tokens are its own, not the chat model's.
    tokens = dict(re.findall(r'^sparkd_prompt_tokens_total\{model_name="([^"]+)"[^}]*\} (\S+)$', text, re.M))
    assert set(tokens) == set(NAMES) and float(tokens["emb"]) > 0


def test_check_prints_each_plan_and_the_box(tmp_path):
    config = tmp_path / "spark.toml"
    config.write_text(config_text(free_port(), shares={"chat": 0.5}))
    r = run_sparkd("check", "--config", config)
    assert r.returncode == 0, r.stdout + r.stderr
    # The models without a share split what the chat model's leaves.
    for name, role, share in zip(NAMES, ("chat", "embed", "rerank"), ("0.5", "0.25", "0.25")):
        assert f"model '{name}' (role {role}, memory_share {share})" in r.stdout, r.stdout
    assert r.stdout.count("memory plan (layers") == 3
    assert re.search(r"^box\n  models +3\n  planned +\S+ \S+ .*\n  budget +", r.stdout, re.M), r.stdout
    assert r.stdout.rstrip().endswith("ok")


def test_a_share_too_small_for_its_model_is_refused_before_loading(tmp_path):
    # The last model's share cannot hold it: the box is refused before the first model loads.
    config = tmp_path / "spark.toml"
    config.write_text(config_text(free_port(), shares={"rr": 0.000001}))
    r = run_sparkd("check", "--config", config)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "model 'rr' does not fit in its memory_share 1e-06" in r.stderr
    assert "model 'rr' (role rerank, memory_share 1e-06)" in r.stdout  # the plans still print
    s = MultiServer(shares={"rr": 0.000001})
    try:
        assert s.proc.wait(timeout=60) == 2
        log = s.output()
    finally:
        s.stop()
    assert "model 'rr' does not fit in its memory_share" in log
    assert "loaded in" not in log and "memory plan of" not in log  # no model loaded its weights
