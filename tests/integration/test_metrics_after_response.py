"""/metrics read the moment a response has ended already counts that response: its
tokens and its finish. (The engine once emitted a request's final tokens before adding
them to the counters, so a reader woken by the response could see the old totals.)"""
import json

import requests

from conftest import metrics, model_id, wait_engine_idle

MODEL = model_id()


def counted(url):
    m = metrics(url)
    return m["vllm:generation_tokens_total"], m["vllm:e2e_request_latency_seconds_count"]


def test_metrics_hold_a_response_the_moment_it_ends(api_server):
    url = api_server.url
    wait_engine_idle(url)
    body = {"model": MODEL, "prompt": "Once upon a time", "temperature": 0, "ignore_eos": True}
    for i in range(24):
        tokens_before, finished_before = counted(url)
        n = 1 + i % 6
        if i % 2:
            r = requests.post(url + "/v1/completions", json={**body, "max_tokens": n}, timeout=60)
            assert r.status_code == 200, r.text
            got = r.json()["usage"]["completion_tokens"]
        else:
            with requests.post(url + "/v1/completions", json={**body, "max_tokens": n, "stream": True,
                                                              "stream_options": {"include_usage": True}},
                               stream=True, timeout=60) as r:
                events = [line for line in r.iter_lines() if line]
            assert events[-1] == b"data: [DONE]"
            got = json.loads(events[-2][6:])["usage"]["completion_tokens"]
        assert got == n
        tokens_after, finished_after = counted(url)
        assert tokens_after - tokens_before == n, f"request {i}: /metrics lags the response that just ended"
        assert finished_after - finished_before == 1
