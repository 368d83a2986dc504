"""Graceful drain on SIGTERM: /health turns 503 and new requests get 503 while in-flight
streams finish; then exit 0. A second signal exits at once; drain_timeout_s cuts off
requests that would run longer."""
import json
import signal
import threading
import time

import pytest
import requests

from conftest import API_SETTINGS, Server, model_id

pytestmark = pytest.mark.cuda_path  # also runs against the emulated CUDA server (conftest.py)

MODEL = model_id()
LONG = {"model": MODEL, "prompt": "Count slowly:", "max_tokens": 40, "temperature": 0, "ignore_eos": True,
        "stream": True}


def start_stream(url, body, out):
    def run():
        out["events"] = []
        try:
            r = requests.post(url + "/v1/completions", json=body, stream=True, timeout=120)
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line:
                    out["events"].append(line)
                    out.setdefault("first", time.monotonic())
        except requests.RequestException as e:  # a server that exits mid-stream cuts it
            out["error"] = e
    t = threading.Thread(target=run)
    t.start()
    return t


def wait_first_event(out, timeout=60):
    deadline = time.monotonic() + timeout
    while "first" not in out and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "first" in out, out


def test_sigterm_drains_streams_then_exits_zero():
    s = Server(settings={**API_SETTINGS, "engine.max_num_seqs": 4, "server.drain_timeout_s": 60}).wait_ready()
    out = {}
    try:
        t = start_stream(s.url, LONG, out)
        wait_first_event(out)
        s.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        health = None
        while time.monotonic() < deadline:
            health = requests.get(s.url + "/health", timeout=5)
            if health.status_code == 503:
                break
            time.sleep(0.01)
        assert health.status_code == 503 and "draining" in health.json()["error"]["message"]
        r = requests.post(s.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=10)
        assert r.status_code == 503 and r.json()["error"]["type"] == "service_unavailable_error"
        assert s.proc.poll() is None, "exited before the stream finished"
        t.join(timeout=120)
        events = out["events"]
        assert events[-1] == b"data: [DONE]"
        finals = [json.loads(e[6:])["choices"][0]["finish_reason"] for e in events[:-1]]
        assert finals[-1] == "length"
        tokens = sum(1 for e in events[:-1] if json.loads(e[6:])["choices"][0]["text"])
        print(f"stream finished during the drain with {tokens} text events")
        assert s.proc.wait(timeout=30) == 0
    finally:
        s.stop()


def test_second_signal_exits_at_once():
    s = Server(settings={**API_SETTINGS, "engine.max_num_seqs": 4, "server.drain_timeout_s": 120}).wait_ready()
    out = {}
    try:
        t = start_stream(s.url, {**LONG, "max_tokens": 350}, out)
        wait_first_event(out)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert s.proc.poll() is None
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        code = s.proc.wait(timeout=10)
        print(f"exited {code} {1000 * (time.monotonic() - t0):.0f} ms after the second signal")
        assert code == 1
        t.join(timeout=30)
        assert "error" in out or out["events"][-1] != b"data: [DONE]", "the stream was not cut"
    finally:
        s.stop()


def test_drain_timeout_cuts_off_and_exits_zero():
    # A stream far longer than the drain timeout: cut off, it ends without reaching
    # max_tokens; ignoring the timeout, the server would wait for all of it.
    s = Server(settings={**API_SETTINGS, "model.max_model_len": 2048, "engine.max_num_seqs": 4,
                         "server.drain_timeout_s": 0.5}).wait_ready()
    out = {}
    try:
        t = start_stream(s.url, {**LONG, "max_tokens": 1500}, out)
        wait_first_event(out)
        t0 = time.monotonic()
        s.proc.send_signal(signal.SIGTERM)
        assert s.proc.wait(timeout=30) == 0
        print(f"exited 0 {1000 * (time.monotonic() - t0):.0f} ms after SIGTERM with a stream still running")
        t.join(timeout=30)
        chunks = [json.loads(e[6:]) for e in out["events"] if e.startswith(b"data: {")]
        choices = [c["choices"][0] for c in chunks if c.get("choices")]
        tokens = sum(1 for c in choices if c["text"])
        finals = [c["finish_reason"] for c in choices if c["finish_reason"]]
        assert tokens < 1500 and "length" not in finals, f"the stream ran to the end: {tokens} tokens, {finals}"
        assert any("error" in c for c in chunks), "the cut-off stream did not say why"
        assert "drain timeout" in s.output()
    finally:
        s.stop()
