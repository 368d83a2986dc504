"""The aarch64 build, run under qemu-aarch64 on an x86_64 machine (natively on arm64): it loads
SmolLM2, its greedy 32 tokens equal the x86_64 build's (and start as transformers' reference
does), and it serves a chat completion equal to the x86_64 server's. The CPU backend's vector
code is compiled to NEON there, so these runs exercise the NEON paths. `make test-arm64` runs
this file with SPARKD_ARM64_BIN (the aarch64 binary), SPARKD_BIN (this machine's build) and
SPARKD_QEMU (the qemu command line, empty on arm64)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from conftest import MODEL, REPO, SPARKD, Server  # noqa: E402

ARM64 = Path(os.environ.get("SPARKD_ARM64_BIN", REPO / "build" / "arm64" / "sparkd")).resolve()
QEMU = os.environ.get("SPARKD_QEMU", "").split()
GOLDEN = json.loads((REPO / "tests" / "golden" / "smollm2_greedy.json").read_text())
TIMEOUT = 900  # an emulated CPU is 10-30x slower


@pytest.fixture(scope="module", autouse=True)
def needs_the_build():
    if not ARM64.exists():
        pytest.fail(f"{ARM64} is missing: `make test-arm64` builds it")
    if not MODEL.exists():
        pytest.fail(f"{MODEL} is missing: run `make model`")


def run(binary_cmd, *args):
    r = subprocess.run([*binary_cmd, *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_binary_is_aarch64_with_neon():
    header = subprocess.run(["readelf", "-h", str(ARM64)], capture_output=True, text=True, check=True).stdout
    assert "AArch64" in header
    out = run([*QEMU, ARM64], "version")
    assert re.search(r"^target: arm64 \(aarch64 neon", out, re.M), out


@pytest.mark.parametrize("case", GOLDEN["cases"][:2], ids=lambda c: c["prompt"][:20])
def test_greedy_32_tokens_equal_x86_64(case):
    args = ("generate", "--model", MODEL, "--prompt", case["prompt"], "--ids", "--max-tokens", "32")
    arm = json.loads(run([*QEMU, ARM64], *args))
    native = json.loads(run([SPARKD], *args))
    assert arm == native
    assert arm["prompt_ids"] == case["prompt_ids"]
    # As test_generate.py: the first 16 tokens follow the reference up to an EOS.
    first = arm["output_ids"][:16]
    assert first == case["output_ids"][:len(first)]


def chat(server):
    from openai import OpenAI
    client = OpenAI(base_url=server.url + "/v1", api_key="unused")
    r = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", temperature=0, max_tokens=16,
                                       messages=[{"role": "user", "content": "Name three colours."}])
    return r.choices[0].message.content


def test_serves_a_chat_completion_like_x86_64(tmp_path):
    binary = ARM64
    if QEMU:
        binary = tmp_path / "sparkd-arm64"
        binary.write_text(f'#!/bin/sh\nexec {" ".join(QEMU)} {ARM64} "$@"\n')
        binary.chmod(0o755)
    settings = {"model.max_model_len": 256, "engine.max_num_seqs": 2}
    with Server(settings=settings, binary=binary) as arm_server:
        arm_server.wait_ready(timeout=TIMEOUT)
        arm = chat(arm_server)
    with Server(settings=settings) as native_server:
        native_server.wait_ready()
        native = chat(native_server)
    assert arm and arm == native
