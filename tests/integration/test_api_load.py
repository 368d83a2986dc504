"""Connections under stress: clients that disconnect while streaming, while queued and during
a non-streaming request have their requests aborted and KV blocks freed; 64 concurrent streams
complete while /health keeps answering quickly; request_timeout_s bounds a request."""
import json
import socket
import statistics
import threading
import time

import pytest
import requests

from conftest import API_SETTINGS, Server, metrics, model_id, wait_engine_idle

pytestmark = pytest.mark.cuda_path  # also runs against the emulated CUDA server (conftest.py)

MODEL = model_id()
LONG = {"model": MODEL, "prompt": "Count from one to a thousand:", "max_tokens": 300, "temperature": 0,
        "ignore_eos": True}


def open_request(url, path, body):
    """Sends a POST on a raw socket and returns the socket without reading the answer."""
    host, port = url.replace("http://", "").split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    data = json.dumps(body).encode()
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(data)}\r\n\r\n").encode() + data)
    return s


def wait_for(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = metrics_now[0]()
        if predicate(m):
            return m
        time.sleep(0.02)
    raise AssertionError("condition not reached")


metrics_now = [None]


@pytest.fixture
def m(api_server):
    metrics_now[0] = lambda: metrics(api_server.url)
    wait_engine_idle(api_server.url)
    return api_server


def test_disconnect_while_streaming_aborts(m):
    before = metrics(m.url)["vllm:generation_tokens_total"]
    s = open_request(m.url, "/v1/completions", {**LONG, "stream": True})
    got = b""
    while got.count(b"data: ") < 3:
        chunk = s.recv(4096)
        assert chunk, f"the server closed the stream after: {got[:500]!r}"
        got += chunk
    s.close()
    after = wait_engine_idle(m.url)
    generated = after["vllm:generation_tokens_total"] - before
    print(f"stream closed after 3 events: {generated:.0f} of 300 tokens generated")
    assert generated < 300


def test_disconnect_during_non_streaming_aborts(m):
    before = metrics(m.url)["vllm:generation_tokens_total"]
    s = open_request(m.url, "/v1/completions", LONG)
    wait_for(lambda x: x["vllm:num_requests_running"] == 1 and x["vllm:generation_tokens_total"] > before)
    s.close()
    after = wait_engine_idle(m.url)
    assert after["vllm:generation_tokens_total"] - before < 300


def test_disconnect_while_queued_aborts():
    s = Server(settings={**API_SETTINGS, "engine.max_num_seqs": 1, "server.max_queued_requests": 4}).wait_ready()
    metrics_now[0] = lambda: metrics(s.url)
    try:
        running = open_request(s.url, "/v1/completions", {**LONG, "max_tokens": 200, "stream": True})
        wait_for(lambda x: x["vllm:num_requests_running"] == 1)
        queued = open_request(s.url, "/v1/completions", {**LONG, "max_tokens": 5})
        wait_for(lambda x: x["vllm:num_requests_waiting"] == 1)
        queued.close()
        # Gone from the queue while the first request still runs.
        after = wait_for(lambda x: x["vllm:num_requests_waiting"] == 0)
        assert after["vllm:num_requests_running"] == 1
        running.close()
        wait_engine_idle(s.url)
    finally:
        s.stop()


def stream_one(url, i, results):
    body = {"model": MODEL, "messages": [{"role": "user", "content": f"Tell me about the number {i}."}],
            "max_tokens": 8, "temperature": 0, "stream": True}
    try:
        r = requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=120)
        events = [line for line in r.iter_lines() if line]
        finish = [json.loads(e[6:])["choices"][0]["finish_reason"] for e in events[:-1]]
        results[i] = (r.status_code, events[-1], [f for f in finish if f])
    except Exception as e:  # the assertion below names what went wrong
        results[i] = (None, repr(e), [])


def test_64_concurrent_streams_while_health_answers(m):
    results = {}
    latencies = []
    done = threading.Event()

    def probe():
        while not done.is_set():
            t0 = time.monotonic()
            r = requests.get(m.url + "/health", timeout=10)
            latencies.append((time.monotonic() - t0, r.status_code))
            time.sleep(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    threads = [threading.Thread(target=stream_one, args=(m.url, i, results)) for i in range(64)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    done.set()
    prober.join()
    ms = sorted(lat * 1000 for lat, _ in latencies)
    print(f"64 streams x 8 tokens in {elapsed:.1f} s; /health over {len(ms)} probes: "
          f"median {statistics.median(ms):.1f} ms, p99 {ms[int(len(ms) * 0.99) - 1]:.1f} ms, max {ms[-1]:.1f} ms")
    for i in range(64):
        status, last, finish = results[i]
        assert status == 200 and last == b"data: [DONE]" and finish in (["length"], ["stop"]), (i, results[i])
    assert all(code == 200 for _, code in latencies)
    # Latency is printed above; on a quiet 2-core machine every probe is well under 100 ms.
    # Only the median is asserted: shared CI machines have scheduling stalls of their own.
    assert statistics.median(ms) < 100, f"/health median {statistics.median(ms):.1f} ms"
    wait_engine_idle(m.url)


def test_request_timeout_ends_requests_with_an_error():
    s = Server(settings={**API_SETTINGS, "engine.max_num_seqs": 4, "server.request_timeout_s": 0.5}).wait_ready()
    try:
        t0 = time.monotonic()
        r = requests.post(s.url + "/v1/completions", json={**LONG, "max_tokens": 350}, timeout=60)
        assert r.status_code == 408, r.text[:300]
        assert "request_timeout_s" in r.json()["error"]["message"]
        assert time.monotonic() - t0 < 10
        r = requests.post(s.url + "/v1/completions", json={**LONG, "max_tokens": 350, "stream": True}, timeout=60)
        lines = [line for line in r.iter_lines() if line]
        assert lines[-1] == b"data: [DONE]"
        assert json.loads(lines[-2][6:])["error"]["type"] == "timeout_error"
        wait_engine_idle(s.url)
    finally:
        s.stop()
