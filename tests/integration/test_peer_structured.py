"""Structured outputs across a head and a worker over loopback TCP (CPU backend).

The head holds each constrained sequence's grammar state and sends the token masks with
its micro-batches; the worker masks its logits rows with them and samples. Python's
jsonschema judges every output, and the pair's greedy outputs must equal a single
process's token for token: schemas, a regex, a choice, and a tool call under
tool_choice "auto" (constrained only once the model opens it). The pair drafts by prompt
lookup, so masks of verification rows are covered as well.
"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest
import requests

from conftest import MODEL, REPO, Server, wait_engine_idle
from test_peer import COMMON, Pair

sys.path.insert(0, str(REPO / "tests" / "gen"))
from constrain_schemas import schemas  # noqa: E402

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="needs the SmolLM2 model (make model)")

SPECULATIVE = {"engine.speculative": "ngram", "engine.num_speculative_tokens": 3, "engine.prompt_lookup_min": 1}
MAX_TOKENS = 32
MESSAGES = [{"role": "system", "content": "Reply with JSON only."}, {"role": "user", "content": "Write a short example."}]
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}]
# An earlier turn that answered with a call, so the model opens one again.
TOOL_MESSAGES = [
    {"role": "user", "content": "Weather in Paris for 2 days?"},
    {"role": "assistant", "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'},
    {"role": "user", "content": "Weather in Rome for 3 days?"}]


def requests_to_run():
    """(name, body, judge) triples; judge(message) returns None when the output is right."""
    out = []
    for i, schema in enumerate(schemas(3, seed=11)):
        def judge(msg, schema=schema):
            jsonschema.validate(json.loads(msg["content"]), schema,
                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        out.append((f"schema {i}", {"messages": MESSAGES, "response_format": {
            "type": "json_schema", "json_schema": {"name": "a", "schema": schema}}}, judge))
    out.append(("regex", {"messages": [{"role": "user", "content": "A date?"}], "guided_regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"},
                lambda msg: None if len(msg["content"]) == 10 else msg))
    out.append(("choice", {"messages": [{"role": "user", "content": "Yes or no?"}], "guided_choice": ["yes", "no", "maybe"]},
                lambda msg: None if msg["content"] in ("yes", "no", "maybe") else msg))

    def call_judge(msg):
        for call in msg.get("tool_calls") or []:
            assert call["function"]["name"] == "get_weather"
            jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER)
        # An opened call is whole unless max_tokens cut it (README: a call opened with fewer
        # tokens left than its closing needs at a byte a token).
        assert "<tool_call>" not in (msg.get("content") or "") or msg["finish_reason"] == "length"
    out.append(("auto tool call", {"messages": TOOL_MESSAGES, "tools": TOOLS, "max_tokens": 48}, call_judge))
    return out


def message(choice):
    return {**choice["message"], "finish_reason": choice["finish_reason"]}


def shown(msg):
    """What a client reads of a message (tool-call ids are random)."""
    return msg.get("content"), [c["function"] for c in msg.get("tool_calls") or []]


def chat(url, body, **extra):
    r = requests.post(url + "/v1/chat/completions", timeout=300,
                      json={"max_tokens": MAX_TOKENS, "temperature": 0, "seed": 5, **body, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_pair_constrains_like_one_process():
    jobs = requests_to_run()
    with Server(COMMON) as single:
        single.wait_ready()
        expected = [message(chat(single.url, body)["choices"][0]) for _, body, _ in jobs]
    pair = Pair(head=SPECULATIVE).wait_ready()
    try:
        with ThreadPoolExecutor(len(jobs)) as pool:
            greedy_out = list(pool.map(lambda job: chat(pair.head.url, job[1]), jobs))
            sampled_out = list(pool.map(lambda job: chat(pair.head.url, job[1], temperature=1.0, n=2), jobs))
        greedy = [message(out["choices"][0]) for out in greedy_out]
        sampled = [out["choices"] for out in sampled_out]
        calls = 0
        for (name, _, judge), e, g, s in zip(jobs, expected, greedy, sampled):
            assert shown(g) == shown(e), f"{name}: pair {g} != single {e}"
            for msg in [g] + [message(c) for c in s]:
                assert judge(msg) is None, f"{name}: {msg}"
                calls += len(msg.get("tool_calls") or [])
        print(f"{len(jobs)} requests equal to one process greedy; {len(jobs) * 3} outputs valid; {calls} tool calls")
        m = wait_engine_idle(pair.head.url)
        assert m["sparkd_kv_blocks_used"] == 0
        # The head computes the masks: at least one per token of the outputs constrained from
        # their first token (an "auto" call only from its opening; drafts add rows).
        constrained = sum(out["usage"]["completion_tokens"]
                          for (name, _, _), g, n2 in zip(jobs, greedy_out, sampled_out) if name != "auto tool call"
                          for out in (g, n2))
        assert m["sparkd_structured_output_mask_seconds_count"] >= constrained > 0
    finally:
        pair.stop()
