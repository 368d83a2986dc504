"""The aarch64 build, run under qemu-aarch64 on an x86_64 machine (natively on arm64): it is an
AArch64 binary built with NEON, and `sparkd serve` answers /health and a greedy /v1/completions
whose token ids equal the x86_64 build's on the same model. The model is the tiny random-weight
llama the emulated-GPU tests serve (conftest.emulated_model_settings: SmolLM2's tokenizer over
two 64-wide layers, load_format = "dummy", the same weights on any machine): SmolLM2 itself took
over 22 minutes for one generation under qemu, this model a few seconds. The CPU backend's vector
code is compiled to NEON there, so these runs exercise the NEON paths. A CUDA build finds no device
under qemu (no driver there) and serves on the CPU backend (engine.backend = "auto"). `make
test-arm64` runs this file for each aarch64 build (CPU only, CUDA) with SPARKD_ARM64_BIN (the
aarch64 binary), SPARKD_BIN (this machine's build) and SPARKD_QEMU (the qemu command line, empty
on arm64)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gen"))
from conftest import MODEL, REPO, Server, emulated_model_settings  # noqa: E402
import tokenizer_reference  # noqa: E402

ARM64 = Path(os.environ.get("SPARKD_ARM64_BIN", REPO / "build" / "arm64" / "sparkd")).resolve()
QEMU = os.environ.get("SPARKD_QEMU", "").split()
TIMEOUT = 300  # an emulated CPU is 10-30x slower; the tiny model loads in seconds even so
# A small server: the KV cache is sized for these, and qemu gets one thread.
SETTINGS = {"model.max_model_len": 256, "engine.max_num_seqs": 2, "engine.cpu_threads": 1}


@pytest.fixture(scope="module", autouse=True)
def needs_the_build():
    if not ARM64.exists():
        pytest.fail(f"{ARM64} is missing: `make test-arm64` builds it")
    if not MODEL.exists():
        pytest.fail(f"{MODEL} is missing (its tokenizer serves the tiny model): run `make model`")


def test_the_binary_is_aarch64_with_neon():
    header = subprocess.run(["readelf", "-h", str(ARM64)], capture_output=True, text=True, check=True).stdout
    assert "AArch64" in header
    r = subprocess.run([*QEMU, str(ARM64), "version"], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^target: arm64 \(aarch64 neon", r.stdout, re.M), r.stdout
    if QEMU and "cuda: built in" in r.stdout:
        # The CUDA runtime starts under qemu and reports the missing driver; it does not crash.
        assert "libcuda.so.1 (the driver's): no device usable" in r.stdout, r.stdout


def reference_ids_of_tokens():
    """token text -> the ids that decode to it alone, by the reference tokenizer (HF tokenizers
    over the GGUF's vocabulary): turns a completion's logprobs tokens back into ids."""
    tok = tokenizer_reference.smollm2_reference()
    ids = {}
    for i in range(tok.get_vocab_size()):
        ids.setdefault(tok.decode([i], skip_special_tokens=False), []).append(i)
    return ids


def greedy_completion(server, model_name):
    """One greedy /v1/completions of 8 tokens, after /health: (token ids, the response choice)."""
    health = requests.get(server.url + "/health", timeout=30)
    assert health.status_code == 200, health.text
    body = {"model": model_name, "prompt": "The capital of France is", "max_tokens": 8,
            "temperature": 0, "logprobs": 1, "ignore_eos": True}
    r = requests.post(server.url + "/v1/completions", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    return choice["logprobs"]["tokens"], choice


def test_serves_a_completion_with_the_token_ids_of_x86_64(tmp_path):
    binary = ARM64
    if QEMU:
        binary = tmp_path / "sparkd-arm64"
        binary.write_text(f'#!/bin/sh\nexec {" ".join(QEMU)} {ARM64} "$@"\n')
        binary.chmod(0o755)
    settings = {**emulated_model_settings(), **SETTINGS}
    with Server(settings=settings, binary=binary) as arm_server:
        arm_server.wait_ready(timeout=TIMEOUT)
        arm_tokens, arm = greedy_completion(arm_server, settings["model.name"])
        served_by = requests.get(arm_server.url + "/api/snapshot", timeout=30).json()["server"]
    with Server(settings=settings) as native_server:
        native_server.wait_ready()
        native_tokens, native = greedy_completion(native_server, settings["model.name"])

    if QEMU:
        assert served_by["backend"].startswith("cpu"), served_by
    assert len(arm_tokens) == 8
    by_text = reference_ids_of_tokens()
    ambiguous = [t for t in arm_tokens + native_tokens if len(by_text.get(t, [])) != 1]
    assert not ambiguous, f"tokens that do not name one id: {ambiguous}"
    arm_ids = [by_text[t][0] for t in arm_tokens]
    native_ids = [by_text[t][0] for t in native_tokens]
    assert arm_ids == native_ids, (arm["text"], native["text"])
    assert arm["text"] == native["text"]
    # The same tokens from the same weights: the log-probabilities differ only by rounding.
    for a, b in zip(arm["logprobs"]["token_logprobs"], native["logprobs"]["token_logprobs"]):
        assert abs(a - b) < 1e-3
