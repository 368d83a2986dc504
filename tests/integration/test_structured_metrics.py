"""Structured-output metrics on the real server with SmolLM2 and the openai SDK: a JSON
schema request (twice: the second finds its grammar in the cache), a regex request, a
tool_choice "required" call and a refused schema move /metrics' counters by exactly those
amounts, the compile histogram by the compiles, and the token-mask histogram by at least
one mask per generated token."""
import re
import uuid

import openai
import pytest
import requests

from conftest import model_id

MODEL_ID = model_id()
KINDS = ("json_schema", "json_object", "regex", "choice", "tool_call", "tool_auto")
HISTOGRAMS = ("sparkd_structured_output_mask_seconds", "sparkd_structured_output_compile_seconds")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\} (\S+)$')


def scrape(url):
    """{(name, labels other than model_name and replica): value} for every sample of /metrics."""
    text = requests.get(url + "/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2))
        labels = tuple(sorted(kv for kv in pairs if kv[0] not in ("model_name", "replica")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out, text


def check_histogram(samples, text, name):
    """Buckets ascend in `le`, counts are cumulative, +Inf equals _count."""
    assert f"# TYPE {name} histogram" in text
    buckets = sorted((float(dict(labels)["le"]), v) for (n, labels), v in samples.items() if n == name + "_bucket")
    assert len(buckets) == 17 and buckets[-1][0] == float("inf"), buckets
    assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), buckets
    assert buckets[-1][1] == samples[(name + "_count", ())]


def test_structured_output_metrics_move_by_the_requests(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    # Names no other test uses, so the first compile of each misses the grammar cache.
    tag = uuid.uuid4().hex[:8]
    before, _ = scrape(server.url)

    schema = {"type": "object", "properties": {f"n_{tag}": {"type": "integer"}}, "required": [f"n_{tag}"],
              "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    tokens = 0
    for _ in range(2):  # the second finds its grammar in the cache
        r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "A number?"}],
                                      response_format=fmt, temperature=0, max_tokens=24)
        tokens += r.usage.completion_tokens
    r = c.completions.create(model=MODEL_ID, prompt="Code:", temperature=1.0, max_tokens=16, seed=3,
                             extra_body={"guided_regex": rf"[0-9]{{3}}-{tag}"})
    assert r.choices[0].text.endswith(tag), r.choices[0].text
    tokens += r.usage.completion_tokens
    tools = [{"type": "function", "function": {"name": f"lookup_{tag}", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}}}]
    r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Weather in Rome?"}],
                                  tools=tools, tool_choice="required", temperature=0, max_tokens=32)
    assert r.choices[0].message.tool_calls[0].function.name == f"lookup_{tag}"
    tokens += r.usage.completion_tokens
    with pytest.raises(openai.BadRequestError, match="minProperties"):
        c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                  response_format={"type": "json_schema", "json_schema": {
                                      "name": "x", "schema": {"type": "object", "minProperties": 1}}})

    after, text = scrape(server.url)

    def moved(name, labels=()):
        return after[(name, labels)] - before[(name, labels)]

    def by_kind(name):
        return {k: moved(name + "_total", (("kind", k),)) for k in KINDS}

    assert by_kind("sparkd_structured_output_requests") == {
        "json_schema": 2, "json_object": 0, "regex": 1, "choice": 0, "tool_call": 1, "tool_auto": 0}
    assert by_kind("sparkd_structured_output_refused") == {
        "json_schema": 1, "json_object": 0, "regex": 0, "choice": 0, "tool_call": 0, "tool_auto": 0}
    assert moved("sparkd_structured_output_cache_hits_total") == 1

    for name in HISTOGRAMS:
        check_histogram(after, text, name)
    # Schema, regex, tool call, and the refused one; the cached schema was not compiled.
    assert moved("sparkd_structured_output_compile_seconds_count") == 4
    assert moved("sparkd_structured_output_compile_seconds_sum") > 0
    # One mask per sampled token (the usage counts each, the end-of-sequence included).
    masks = moved("sparkd_structured_output_mask_seconds_count")
    mask_seconds = moved("sparkd_structured_output_mask_seconds_sum")
    print(f"{tokens} constrained tokens, {masks:.0f} masks, mean mask {mask_seconds / masks * 1e6:.1f} us")
    assert tokens <= masks <= tokens + 4
    assert 0 < mask_seconds < masks * 0.1
