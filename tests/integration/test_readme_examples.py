"""The README's API examples, run as a new user would: the shell and Python snippets of the
"## API" section are extracted from README.md and run unchanged against a server of the default
model at the address they name (127.0.0.1:8000). Only when that port is taken on the test
machine is the address in the snippets rewritten to the test server's port."""
import json
import re
import socket
import subprocess
import sys

import pytest

from conftest import MODEL, REPO, Server


def api_snippets():
    """(kind, code) for each indented code block of the README's API section."""
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## API\n(.*?)^## ", text, re.S | re.M).group(1)
    blocks, current = [], []
    for line in section.split("\n") + ["end"]:
        if line.startswith("    ") or (current and line == ""):
            current.append(line[4:])
            continue
        if current:
            blocks.append("\n".join(current).strip("\n") + "\n")
        current = []
    snippets = []
    for code in blocks:
        first = code.split(None, 1)[0]
        if first in ("from", "import"):
            snippets.append(("python", code))
        elif first in ("curl", "export"):
            snippets.append(("shell", code))
    return snippets


def port_is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.fixture(scope="module")
def readme_server():
    if not MODEL.exists():
        pytest.fail(f"{MODEL} is missing: run `make model`")
    # The snippets set no max_tokens: a short context bounds how long a sampled answer can run.
    settings = {"model.max_model_len": 256}
    if port_is_free(8000):
        settings["server.port"] = 8000
    s = Server(settings=settings).wait_ready()
    yield s
    s.stop()


def run_snippet(kind, code, server):
    if server.port != 8000:
        code = code.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
    argv = [sys.executable, "-c", code] if kind == "python" else ["bash", "-e", "-o", "pipefail", "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=REPO)


def test_the_api_section_has_the_snippets_users_copy():
    kinds = [k for k, _ in api_snippets()]
    assert kinds.count("python") >= 2 and any("curl" in c for k, c in api_snippets() if k == "shell"), kinds


@pytest.mark.parametrize("index", range(len(api_snippets())))
def test_readme_api_snippet_runs_verbatim(readme_server, index):
    kind, code = api_snippets()[index]
    r = run_snippet(kind, code, readme_server)
    assert r.returncode == 0, f"{kind} snippet failed:\n{code}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
    if code.startswith("curl"):
        answer = json.loads(r.stdout)
        assert answer["object"] == "chat.completion", answer
        assert answer["choices"][0]["message"]["content"].strip(), answer
    elif kind == "python":
        assert r.stdout.strip(), f"the snippet printed nothing:\n{code}\nstderr:\n{r.stderr}"


def test_a_gguf_is_served_without_its_extension_and_found_with_it(readme_server):
    import requests
    models = requests.get(readme_server.url + "/v1/models", timeout=30).json()
    assert [m["id"] for m in models["data"]] == ["SmolLM2-135M-Instruct.Q4_1"]
    for name, status in (("SmolLM2-135M-Instruct.Q4_1", 200), ("SmolLM2-135M-Instruct.Q4_1.gguf", 200),
                         ("SmolLM2-135M-Instruct", 404), ("SmolLM2-135M-Instruct.Q4_1.gguf.gguf", 404)):
        r = requests.post(readme_server.url + "/v1/chat/completions", timeout=120,
                          json={"model": name, "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == status, (name, r.text)
        if status == 404:
            assert r.json()["error"]["code"] == "model_not_found"
