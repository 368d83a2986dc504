"""Shared helpers for the integration tests: where things are, and a real sparkd server."""
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
SPARKD = Path(os.environ.get("SPARKD_BIN", REPO / "build" / "sparkd")).resolve()
# The same build with engine/util/test_hooks.h compiled in (make builds it beside sparkd).
SPARKD_TEST_HOOKS = SPARKD.parent / "test-hooks" / "sparkd"
# The real tokenizer files, plain (tests/gen/fixture_files.py: tests/fixtures stores the large
# ones xz-compressed; build/fixtures holds them decompressed, refreshed here when needed).
sys.path.append(str(REPO / "tests" / "gen"))
import fixture_files  # noqa: E402

FIXTURES = fixture_files.fixtures_dir().resolve()
MODEL = REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

# The CUDA path without a GPU: SPARKD_EMULATED_GPU=1 with SPARKD_BIN=build/emu/sparkd (the
# server on the CUDA emulator, tests/gpu/emu) runs only the tests marked `cuda_path`, and a
# server started on MODEL runs a tiny model instead (emulated_model_settings): SmolLM2's
# tokenizer and chat template over two 64-wide layers of random weights, served under
# MODEL's name, so the tests' requests and ids are unchanged. `make emu-server-test`.
EMULATED_GPU = os.environ.get("SPARKD_EMULATED_GPU") == "1"


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda_path: runs against the emulated CUDA server too (SPARKD_EMULATED_GPU=1)")
    config.addinivalue_line("markers", "emulated_gpu_only: runs only with SPARKD_EMULATED_GPU=1")


def pytest_collection_modifyitems(config, items):
    wanted = "cuda_path" if EMULATED_GPU else None
    keep = [i for i in items if (not wanted or i.get_closest_marker(wanted))
            and (EMULATED_GPU or not i.get_closest_marker("emulated_gpu_only"))]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


_emulated_model_dir = None


def emulated_model_settings():
    """The settings that serve the emulator's stand-in for MODEL (see EMULATED_GPU)."""
    global _emulated_model_dir
    if _emulated_model_dir is None:
        from gguf import GGUFReader  # the reference reader, as the loader tests use it
        d = Path(tempfile.mkdtemp(prefix="sparkd-emu-model-"))
        field = GGUFReader(str(MODEL)).fields["tokenizer.chat_template"]
        (d / "chat_template.jinja").write_bytes(bytes(field.parts[field.data[0]]))
        # float32 weights: the CUDA backend computes them in FP16.
        (d / "config.json").write_text(json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "vocab_size": 49152, "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2,
            "torch_dtype": "float32", "hidden_act": "silu"}))
        _emulated_model_dir = d
    d = _emulated_model_dir
    return {"model.path": str(d), "model.load_format": "dummy", "model.tokenizer": str(MODEL),
            "model.chat_template": str(d / "chat_template.jinja"), "model.name": model_id()}


def character_chat_model(dest, special, eos_id, bos_token, eos_token, template, max_len=4096):
    """The tiny Nemotron-H (tests/golden/models/nemotron_h) as a chat model for the chat-format
    tests, in folder `dest`: a character tokenizer (printable ASCII and newline as themselves,
    other ids as CJK characters the tests never write), `special` ({text: id}) as special tokens,
    room for `max_len` positions (its attention has no positions: only a bound) and `template`
    beside it as chat_template.jinja, as releases ship it."""
    shutil.copytree(REPO / "tests" / "golden" / "models" / "nemotron_h", dest)
    config = json.loads((dest / "config.json").read_text())
    config["max_position_embeddings"] = max_len
    (dest / "config.json").write_text(json.dumps(config))
    ascii_ids = list(range(32, 127)) + [10]
    vocab = {chr(i) if i in ascii_ids else chr(0x4E00 + i): i for i in range(256)}
    vocab = {t: i for t, i in vocab.items() if i not in special.values()}
    vocab.update(special)
    (dest / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "pre_tokenizer": None,
        "post_processor": None, "decoder": {"type": "Fuse"},
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for t, i in special.items()],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": []}}))
    (dest / "tokenizer_config.json").write_text(json.dumps({"bos_token": bos_token, "eos_token": eos_token}))
    (dest / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_id}))
    shutil.copyfile(template, dest / "chat_template.jinja")
    return dest


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_sparkd(*args, stdin=None, timeout=120, env=None):
    """Runs a sparkd subcommand to completion; returns the CompletedProcess (text mode)."""
    return subprocess.run([str(SPARKD), *map(str, args)], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=env)


def check_refuses(path, *fields):
    """`sparkd check` on `path` fails as bad input does (exit status 2, no crash), naming each
    of `fields`; returns its message."""
    r = run_sparkd("check", "--model", path)
    assert r.returncode == 2, r.stdout + r.stderr
    for f in fields:
        assert f in r.stderr, f"{f!r} not named in: {r.stderr}"
    assert "Aborted" not in r.stderr and "terminate" not in r.stderr
    return r.stderr


class Server:
    """A sparkd serve process on a free port, with a config written for the test."""

    def __init__(self, settings=None, env=None, model=MODEL, binary=SPARKD):
        # A fixed server.port in the settings is kept (a replica restarted where it was).
        self.port = int((settings or {}).get("server.port") or free_port())
        self.dir = Path(tempfile.mkdtemp(prefix="sparkd-test-"))
        # A serving process sizes its KV cache from the memory budget, up to max_num_seqs
        # sequences of max_model_len; these bounds keep a test server to a few hundred MB
        # (settings override them).
        model_settings = emulated_model_settings() if EMULATED_GPU and model == MODEL else {"model.path": str(model)}
        base = {**model_settings, "server.port": self.port, "server.host": "127.0.0.1",
                "engine.cpu_threads": 2, "model.max_model_len": 2048, "engine.max_num_seqs": 8}
        base.update(settings or {})
        self.config = self.dir / "spark.toml"
        self.config.write_text(to_toml(base))
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "sparkd.log", "w+")
        self.proc = subprocess.Popen([str(binary), "serve", "--config", str(self.config)],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def wait_ready(self, timeout=120):
        """Waits until /health answers 200; fails with the log if the process dies first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"sparkd exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise AssertionError(f"sparkd not ready after {timeout}s:\n{self.output()}")

    def output(self):
        self.log.flush()
        return (self.dir / "sparkd.log").read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


@contextlib.contextmanager
def pooled_server(kind, path, role, name, settings):
    """A ready server of an embedder or reranker ([model] role), with `kind` ("hf" or "gguf":
    which file it loaded) kept on it for the tests."""
    with Server(settings={**settings, "model.role": role, "model.name": name}, model=path) as s:
        s.wait_ready()
        s.kind = kind
        yield s


def check_embedding(got, want, cosine, max_abs):
    """An embedding against its golden vector: the cosine above `cosine`, every value within
    `max_abs`, and of unit length."""
    import numpy as np
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    cos = got @ want / (np.linalg.norm(got) * np.linalg.norm(want))
    assert cos > cosine, cos
    assert np.max(np.abs(got - want)) < max_abs, np.max(np.abs(got - want))
    assert abs(np.linalg.norm(got) - 1) < 1e-5


def to_toml(settings):
    """{"section.key": value} -> TOML text."""
    sections = {}
    for dotted, value in settings.items():
        section, key = dotted.split(".", 1)
        sections.setdefault(section, {})[key] = value
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        for key, value in keys.items():
            lines.append(f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


@pytest.fixture(scope="session")
def server():
    """One ready server with the default model, shared by the tests that only read from it."""
    s = Server().wait_ready()
    yield s
    s.stop()


# ---- API servers and helpers (shared by test_api_*.py and test_drain*.py) ------------------

# Small context and KV cache so a test server starts in seconds and uses little memory; 64
# sequences so the concurrency tests run at the default batch width.
API_SETTINGS = {"model.max_model_len": 384, "engine.max_num_seqs": 64, "server.max_queued_requests": 64,
                "engine.max_num_batched_tokens": 2048}


def model_id(model=MODEL):
    """The id a server started on `model` with no model.name serves: a GGUF's file name
    without the extension, a folder's name."""
    name = Path(model).name
    return name[:-len(".gguf")] if name.endswith(".gguf") else name


@pytest.fixture(scope="session")
def api_server():
    """One ready server for the API tests that do not stop or overload it."""
    s = Server(settings=API_SETTINGS).wait_ready()
    yield s
    s.stop()


def parse_metrics(text):
    """Prometheus text -> {sample name with labels stripped: value} (the last one wins)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, value = line.rsplit(" ", 1)
        out[name_labels.split("{", 1)[0]] = float(value)
    return out


def metrics(url):
    r = requests.get(url + "/metrics", timeout=10)
    r.raise_for_status()
    return parse_metrics(r.text)


def wait_engine_idle(url, timeout=20):
    """Waits until no request runs or waits and no KV block is referenced; returns the metrics."""
    deadline = time.monotonic() + timeout
    m = {}
    while time.monotonic() < deadline:
        m = metrics(url)
        if (m["vllm:num_requests_running"] == 0 and m["vllm:num_requests_waiting"] == 0
                and m["sparkd_kv_blocks_used"] == 0 and m["sparkd_sequences_admitted"] == 0):
            return m
        time.sleep(0.05)
    raise AssertionError(f"engine not idle after {timeout}s: " + str(
        {k: v for k, v in m.items() if k in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                                             "sparkd_kv_blocks_used", "sparkd_sequences_admitted")}))


def health_ok(url, timeout=5):
    r = requests.get(url + "/health", timeout=timeout)
    return r.status_code == 200


def assemble_chat_stream(chunks):
    """A chat completions stream (openai SDK chunks) put together as a client does: the
    reasoning, the content, the tool calls as (name, arguments text) and the finish reason."""
    reasoning, content, calls, finish = "", "", {}, None
    for chunk in chunks:
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        reasoning += (d.model_extra or {}).get("reasoning_content") or ""
        content += d.content or ""
        for t in d.tool_calls or []:
            name, args = calls.get(t.index, ("", ""))
            calls[t.index] = (name + (t.function.name or ""), args + (t.function.arguments or ""))
        finish = chunk.choices[0].finish_reason or finish
    return reasoning, content, [calls[i] for i in sorted(calls)], finish
