"""Raw HTTP: the SSE framing byte for byte, usage with cached tokens after a repeated prefix,
/tokenize, /detokenize, /metrics names, and keep-alive."""
import http.client
import json
import uuid

import pytest
import requests

from conftest import metrics, model_id

pytestmark = pytest.mark.cuda_path  # also runs against the emulated CUDA server (conftest.py)

MODEL = model_id()


def raw_stream(url, path, body):
    """POSTs and returns (response, raw body bytes) read to the end of the chunked stream."""
    host, port = url.replace("http://", "").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp, data


def split_events(data):
    text = data.decode("utf-8")
    assert text.endswith("data: [DONE]\n\n"), text[-200:]
    events = text.split("\n\n")
    assert events[-1] == ""
    return events[:-1]


def canonical(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def test_chat_sse_framing_byte_for_byte(api_server):
    resp, data = raw_stream(api_server.url, "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 5, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True}})
    assert resp.status == 200
    assert resp.getheader("Content-Type").startswith("text/event-stream")
    assert resp.getheader("Transfer-Encoding") == "chunked"
    assert resp.getheader("Content-Encoding") is None
    events = split_events(data)
    assert events[-1] == "data: [DONE]"
    chunks = []
    for e in events[:-1]:
        assert e.startswith("data: ") and "\n" not in e
        obj = json.loads(e[len("data: "):])
        assert e == "data: " + canonical(obj), "not compact JSON in OpenAI's key order"
        chunks.append(obj)
    first, final, usage = chunks[0], chunks[-2], chunks[-1]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and next(iter(ids)).startswith("chatcmpl-")
    assert list(first) == ["id", "object", "created", "model", "choices", "usage"]
    assert first["object"] == "chat.completion.chunk" and first["model"] == MODEL
    assert first["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                 "finish_reason": None}]
    assert first["usage"] is None
    for c in chunks[1:-2]:
        assert list(c["choices"][0]["delta"]) == ["content"] and c["choices"][0]["finish_reason"] is None
    assert final["choices"][0]["delta"] == {} and final["choices"][0]["finish_reason"] in ("stop", "length")
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(chunks) - 3
    assert usage["usage"]["total_tokens"] == usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"]


def test_completion_sse_without_usage(api_server):
    resp, data = raw_stream(api_server.url, "/v1/completions", {
        "model": MODEL, "prompt": "Once upon", "max_tokens": 4, "temperature": 0, "stream": True})
    events = split_events(data)
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert all("usage" not in c for c in chunks)
    assert all(c["object"] == "text_completion" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert sum(1 for c in chunks if c["choices"][0]["text"]) >= 1


def test_cached_tokens_after_a_repeated_prefix(api_server):
    prefix = f"Document {uuid.uuid4()}: " + "the quick brown fox jumps over the lazy dog. " * 12
    body = {"model": MODEL, "prompt": prefix + "Summary:", "max_tokens": 2, "temperature": 0}
    first = requests.post(api_server.url + "/v1/completions", json=body, timeout=60).json()["usage"]
    body["prompt"] = prefix + "In short:"
    second = requests.post(api_server.url + "/v1/completions", json=body, timeout=60).json()["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 64 and cached % 16 == 0 and cached < second["prompt_tokens"], second
    m = metrics(api_server.url)
    assert m["vllm:prefix_cache_hits_total"] >= cached
    assert m["vllm:prefix_cache_queries_total"] >= first["prompt_tokens"] + second["prompt_tokens"] - 2


def test_tokenize_detokenize_round_trip(api_server):
    r = requests.post(api_server.url + "/tokenize", json={"prompt": "Hello, world!"}, timeout=30).json()
    assert r["count"] == len(r["tokens"]) and r["max_model_len"] == 384
    back = requests.post(api_server.url + "/detokenize", json={"tokens": r["tokens"]}, timeout=30).json()
    assert back["prompt"].endswith("Hello, world!")
    chat = requests.post(api_server.url + "/tokenize",
                         json={"messages": [{"role": "user", "content": "Hi"}]}, timeout=30).json()
    assert chat["count"] > r["count"]
    bad = requests.post(api_server.url + "/detokenize", json={"tokens": [10 ** 9]}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"


def test_metrics_exposes_vllm_and_sparkd_names(api_server):
    requests.post(api_server.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60)
    text = requests.get(api_server.url + "/metrics", timeout=10).text
    label = f'model_name="{MODEL}"'
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:time_per_output_token_seconds_bucket", "vllm:e2e_request_latency_seconds_count",
                 "sparkd_kv_blocks_used", "sparkd_kv_blocks_total"):
        assert f"{name}{{{label}" in text, name
    m = metrics(api_server.url)
    assert 0 <= m["vllm:kv_cache_usage_perc"] <= 1
    assert m["vllm:generation_tokens_total"] >= 2 and m["vllm:e2e_request_latency_seconds_count"] >= 1


def test_keep_alive_serves_many_requests_on_one_connection(api_server):
    host, port = api_server.url.replace("http://", "").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    for _ in range(5):
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "A", "max_tokens": 1}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["choices"]
        conn.request("GET", "/health")
        r = conn.getresponse()
        assert r.status == 200 and r.read()
    conn.close()
