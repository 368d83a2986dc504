"""Server settings the README documents, each seen working from outside: cors_origins,
api_key_file, [log] format = "json", and 503 while the model loads."""
import json
import time

import openai
import requests

from conftest import API_SETTINGS, SPARKD_TEST_HOOKS, Server, model_id

MODEL = model_id()
SMALL = {**API_SETTINGS, "engine.max_num_seqs": 4}


def test_cors_origins_answer_listed_origins_only():
    s = Server(settings={**SMALL, "server.cors_origins": ["https://app.example"]}).wait_ready()
    try:
        ok = requests.get(s.url + "/v1/models", headers={"Origin": "https://app.example"}, timeout=10)
        assert ok.headers.get("Access-Control-Allow-Origin") == "https://app.example"
        other = requests.get(s.url + "/v1/models", headers={"Origin": "https://evil.example"}, timeout=10)
        assert "Access-Control-Allow-Origin" not in other.headers
        pre = requests.options(s.url + "/v1/chat/completions", timeout=10, headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert pre.status_code == 204
        assert "POST" in pre.headers["Access-Control-Allow-Methods"]
        assert "Authorization" in pre.headers["Access-Control-Allow-Headers"]
    finally:
        s.stop()


def test_api_key_file_keys_are_accepted_comments_are_not(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# the team's keys\nk-first-0001\n  k-second-0002  \n\n# k-commented-out\n")
    s = Server(settings={**SMALL, "server.api_key_file": str(keys)}).wait_ready()
    try:
        for key in ("k-first-0001", "k-second-0002"):
            c = openai.OpenAI(base_url=s.url + "/v1", api_key=key, max_retries=0)
            assert c.models.list().data[0].id == MODEL
        for key in ("k-commented-out", "# the team's keys", "wrong"):
            c = openai.OpenAI(base_url=s.url + "/v1", api_key=key, max_retries=0)
            try:
                c.models.list()
                raise AssertionError(f"key {key!r} was accepted")
            except openai.AuthenticationError:
                pass
    finally:
        s.stop()


def test_json_log_lines_are_json_objects():
    s = Server(settings={**SMALL, "log.format": "json"}).wait_ready()
    try:
        assert requests.post(s.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60).ok
    finally:
        s.stop()
    lines = [line for line in (s.dir / "sparkd.log").read_text().splitlines() if line.strip()]
    assert len(lines) >= 3
    records = [json.loads(line) for line in lines]  # every line, or this raises
    assert all(isinstance(r, dict) for r in records)
    assert any("listening" in json.dumps(r) for r in records)


def test_requests_get_503_while_the_model_loads(tmp_path):
    """The test build holds the load while a file exists (engine/util/test_hooks.h)."""
    hold = tmp_path / "hold"
    hold.touch()
    s = Server(settings=SMALL, binary=SPARKD_TEST_HOOKS, env={"SPARKD_TEST_LOAD_HOLD_FILE": str(hold)})
    try:
        health = None
        deadline = time.monotonic() + 60  # the HTTP port opens before the load starts
        while health is None and time.monotonic() < deadline and s.proc.poll() is None:
            try:
                health = requests.get(s.url + "/health", timeout=5)
            except requests.ConnectionError:
                time.sleep(0.05)
        assert health is not None and health.status_code == 503, s.output()
        assert "load" in health.json()["error"]["message"]
        r = requests.post(s.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=10)
        assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable_error"
        hold.unlink()
        s.wait_ready()
        assert requests.post(s.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60).ok
    finally:
        if hold.exists():
            hold.unlink()
        s.stop()
