"""Structured outputs end to end: the real server with SmolLM2, the official openai SDK, and
Python's jsonschema (with its FormatChecker) as the judge of every output.

A model this small writes JSON that does not match a schema most of the time on its own, so
these tests fail when the constraint is not applied. It also rambles inside strings, so many
outputs reach max_tokens: the constraint then closes the value before the limit, and every
output, finished or cut, must parse and validate. SPARKD_STRUCTURED_SCHEMAS and
SPARKD_STRUCTURED_TOOL_RUNS set the sizes (make test: 12 schemas x 2 temperatures, 50 tool
calls; the acceptance run, `make constrain-oracle`: 200 and 100).
"""
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest
import requests
from pydantic import BaseModel

from conftest import REPO, model_id

sys.path.insert(0, str(REPO / "tests" / "gen"))
from constrain_schemas import schemas  # noqa: E402

NUM_SCHEMAS = int(os.environ.get("SPARKD_STRUCTURED_SCHEMAS", "12"))
TOOL_RUNS = int(os.environ.get("SPARKD_STRUCTURED_TOOL_RUNS", "50"))
AUTO_RUNS = max(10, TOOL_RUNS // 5)
MAX_TOKENS = 200
MODEL_ID = model_id()
MESSAGES = [{"role": "system", "content": "Reply with JSON only."},
            {"role": "user", "content": "Write a short example."}]


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


def check(schema, text):
    value = json.loads(text)
    jsonschema.validate(value, schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    return value


def why_invalid(schema, text):
    """None when text parses and validates; else the reason, so a suite counts every failure."""
    try:
        check(schema, text)
    except (ValueError, jsonschema.ValidationError) as e:
        return f"{type(e).__name__}: {str(e)[:200]} in {text[:200]!r}"
    return None


def test_json_schema_suite_validates(server):
    """Every schema, greedy and at temperature 1.0: each output parses and validates."""
    c = client(server)

    def one(job):
        schema, temperature = job
        r = c.chat.completions.create(
            model=MODEL_ID, messages=MESSAGES, temperature=temperature, max_tokens=MAX_TOKENS, seed=7,
            response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
        return schema, r.choices[0]

    jobs = [(s, t) for s in schemas(NUM_SCHEMAS, seed=3) for t in (0.0, 1.0)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, jobs))
    failures = {0.0: [], 1.0: []}
    for (schema, choice), (_, temperature) in zip(results, jobs):
        why = why_invalid(schema, choice.message.content)
        if why:
            failures[temperature].append((json.dumps(schema)[:200], why))
    closed = sum(c.finish_reason == "length" for _, c in results)
    for temperature, failed in failures.items():
        print(f"temperature {temperature}: {NUM_SCHEMAS - len(failed)} of {NUM_SCHEMAS} schemas' outputs validate")
    print(f"{closed} of {len(results)} outputs were closed by max_tokens={MAX_TOKENS}")
    assert not failures[0.0] and not failures[1.0], failures


class Weather(BaseModel):
    city: str
    celsius: int
    sunny: bool


def test_parse_with_pydantic(server):
    r = client(server).chat.completions.parse(model=MODEL_ID, messages=[{"role": "user", "content": "Weather in Oslo?"}],
                                              response_format=Weather, temperature=1.0, max_tokens=200)
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, Weather)
    check(Weather.model_json_schema(), r.choices[0].message.content)


def test_json_object_streaming_with_n_and_logprobs(server):
    stream = client(server).chat.completions.create(
        model=MODEL_ID, messages=MESSAGES, response_format={"type": "json_object"}, n=3, stream=True, temperature=1.0,
        max_tokens=MAX_TOKENS, logprobs=True, seed=11)
    texts, finish = {}, {}
    for chunk in stream:
        for ch in chunk.choices:
            texts[ch.index] = texts.get(ch.index, "") + (ch.delta.content or "")
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
    assert sorted(texts) == [0, 1, 2]
    for text in texts.values():
        assert isinstance(json.loads(text), dict)


def test_choice_regex_and_vllm_fields(server):
    c = client(server)
    colors = ["red", "green", "blue"]
    for extra in ({"guided_choice": colors}, {"structured_outputs": {"choice": colors}}):
        r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "A color?"}], temperature=1.0,
                                      max_tokens=10, extra_body=extra)
        assert r.choices[0].message.content in colors
    pattern = r"\(\d{3}\) \d{3}-\d{4}"
    for extra in ({"guided_regex": pattern}, {"structured_outputs": {"regex": pattern}}):
        r = c.completions.create(model=MODEL_ID, prompt="Phone:", temperature=1.0, max_tokens=30, extra_body=extra)
        import re
        assert re.fullmatch(pattern, r.choices[0].text), r.choices[0].text
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    r = c.completions.create(model=MODEL_ID, prompt="Status:", temperature=1.0, max_tokens=30, extra_body={"guided_json": schema})
    check(schema, r.choices[0].text)


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit", "days"]}}},
    {"type": "function", "function": {"name": "send_email", "parameters": {
        "type": "object", "properties": {"to": {"type": "string", "format": "email"}, "subject": {"type": "string"},
                                         "urgent": {"type": "boolean"}},
        "required": ["to", "subject"]}}},
]
SCHEMA_OF = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def test_tool_choice_required_always_parses(server):
    """Calls at temperature 1.0: every one names a tool and its arguments validate, the ones
    max_tokens would have cut included (the constraint closes them in time)."""
    c = client(server)

    def one(seed):
        r = c.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Weather in Rome this week?"}],
                                      tools=TOOLS, tool_choice="required", temperature=1.0, max_tokens=MAX_TOKENS,
                                      n=10, seed=seed)
        return r.choices

    with ThreadPoolExecutor(4) as pool:
        choices = [ch for batch in pool.map(one, range(TOOL_RUNS // 10)) for ch in batch]
    assert len(choices) == TOOL_RUNS // 10 * 10
    failures = []
    for ch in choices:
        if not ch.message.tool_calls:
            failures.append(("no tool call", ch.message.content))
            continue
        call = ch.message.tool_calls[0]
        why = why_invalid(SCHEMA_OF.get(call.function.name, {"not": {}}), call.function.arguments)
        if why:
            failures.append((call.function.name, why))
    closed = sum(ch.finish_reason == "length" for ch in choices)
    print(f"{len(choices) - len(failures)} of {len(choices)} tool calls validate; {closed} were closed by max_tokens={MAX_TOKENS}")
    assert not failures, failures[:5]


# An earlier turn answered with a call, so that this small model opens one again often.
AUTO_MESSAGES = [
    {"role": "user", "content": "Weather in Paris for 2 days, in celsius?"},
    {"role": "assistant", "content": '<tool_call>\n{"name": "get_weather", "arguments": '
                                     '{"city": "Paris", "unit": "celsius", "days": 2}}\n</tool_call>'},
    {"role": "user", "content": "And the weather in Rome this week?"}]


def test_tool_choice_auto_constrains_the_calls_the_model_opens(server):
    """tool_choice "auto" at temperature 1.0: the model may answer in text, but every call
    it opens with <tool_call> names a declared function and its arguments validate (no
    opened call is left unparsed in the content)."""
    c = client(server)

    def one(seed):
        return c.chat.completions.create(model=MODEL_ID, messages=AUTO_MESSAGES, tools=TOOLS, temperature=1.0,
                                         max_tokens=80, n=10, seed=seed).choices

    with ThreadPoolExecutor(2) as pool:
        choices = [ch for batch in pool.map(one, range(AUTO_RUNS // 10)) for ch in batch]
    calls, invalid, failures = 0, 0, []
    for ch in choices:
        # Whole unless max_tokens cut it (a call opened with fewer tokens left than it needs).
        if "<tool_call>" in (ch.message.content or "") and ch.finish_reason != "length":
            failures.append(("an opened call was not parsed", ch.message.content))
        for call in ch.message.tool_calls or []:
            calls += 1
            why = why_invalid(SCHEMA_OF.get(call.function.name, {"not": {}}), call.function.arguments)
            if why:
                invalid += 1
                failures.append((call.function.name, why))
    print(f"tool_choice auto: {sum(bool(ch.message.tool_calls) for ch in choices)} of {len(choices)} answers "
          f"call a tool; {calls - invalid} of {calls} calls validate")
    assert calls >= len(choices) // 4, "the prompt should make the model call a tool often"
    assert not failures, failures[:5]


def test_named_tool_choice(server):
    r = client(server).chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "Weather in Rome for 3 days, in celsius"}], tools=TOOLS,
        temperature=0, tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=MAX_TOKENS)
    assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    check(SCHEMA_OF["get_weather"], call.function.arguments)


def nested(depth):
    """JSON text of a schema `depth` objects deep (Python's json cannot write it)."""
    return '{"type":"object","properties":{"a":' * depth + '{"type":"string"}' + "}}" * depth


HOSTILE = {
    "ref cycle": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    "1000 levels": None,  # raw text below
    "100k enum": {"enum": [f"value-{i:06d}" for i in range(100_000)]},
    "6 MB schema": {"type": "object", "properties": {f"p{i:07d}": {"type": "string", "description": "x" * 40}
                                                     for i in range(100_000)}},
    "unsupported keyword": {"type": "array", "uniqueItems": True},
    "bad pattern": {"type": "string", "pattern": "(a"},
}


def test_hostile_schemas_fail_fast_while_others_stream(server):
    """Each hostile schema ends in a 400 (or 413 for a body over server.max_body_bytes)
    within seconds, while a streaming request keeps going and /health stays fast."""
    stop = threading.Event()
    health_ms, chunks = [], []

    def poll_health():
        while not stop.is_set():
            t = time.monotonic()
            requests.get(server.url + "/health", timeout=10)
            health_ms.append((time.monotonic() - t) * 1000)
            time.sleep(0.02)

    def stream():
        s = client(server).chat.completions.create(model=MODEL_ID, messages=MESSAGES, stream=True, max_tokens=300,
                                                   temperature=1.0, response_format={"type": "json_object"})
        for chunk in s:
            chunks.append(time.monotonic())

    threads = [threading.Thread(target=poll_health), threading.Thread(target=stream)]
    for t in threads:
        t.start()
    try:
        for name, schema in HOSTILE.items():
            body = {"model": MODEL_ID, "messages": MESSAGES, "max_tokens": 5,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": "SCHEMA"}}}
            text = json.dumps(body).replace('"SCHEMA"', nested(1000) if schema is None else json.dumps(schema))
            t = time.monotonic()
            r = requests.post(server.url + "/v1/chat/completions", data=text, timeout=60,
                              headers={"content-type": "application/json"})
            elapsed = time.monotonic() - t
            assert r.status_code in (400, 413), (name, r.status_code, r.text[:300])
            assert r.json()["error"]["message"], name
            assert elapsed < 10, (name, elapsed)
        # A pattern that backtracking engines take exponential time on is just a grammar here.
        body = {"model": MODEL_ID, "prompt": "a", "max_tokens": 20, "temperature": 1.0, "guided_regex": "(a+)+b"}
        r = requests.post(server.url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 200
    finally:
        threads[1].join(timeout=300)
        # Enough samples that the 99th percentile is not the worst one or two of a short run.
        deadline = time.monotonic() + 10
        while len(health_ms) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        threads[0].join(timeout=30)
    assert chunks, "the streaming request produced nothing"
    health_ms.sort()
    assert health_ms[int(len(health_ms) * 0.99) - 1] < 100, health_ms[-5:]


def test_unsupported_keyword_is_named(server):
    body = {"model": MODEL_ID, "messages": MESSAGES,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "minProperties": 1}}}}
    r = requests.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400
    err = r.json()["error"]
    assert "minProperties" in err["message"] and err["param"] == "response_format"
    body = {"model": MODEL_ID, "messages": MESSAGES, "guided_choice": ["a"], "guided_regex": "b"}
    r = requests.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and "only one" in r.json()["error"]["message"]
