"""The official anthropic SDK's Messages API against sparkd: messages.create and
messages.stream (every event validated against the SDK's own typed event models), tools and
tool_result turns, stop sequences, count_tokens, x-api-key, and errors in Anthropic's shape."""
import json

import anthropic
import pytest
import requests
from pydantic import TypeAdapter
from anthropic.types import Message, RawMessageStreamEvent

from conftest import API_SETTINGS, Server, model_id

MODEL = model_id()
USER = [{"role": "user", "content": "Name three colors."}]
TIME_TOOL = {"name": "get_time", "description": "Current time", "input_schema": {"type": "object", "properties": {}}}
# SmolLM2 token ids of "{}" and "}" (see test_api_openai.py): they close a forced get_time call.
STEER_EMPTY_ARGS = {"6150": 100, "109": 100}
EVENTS = TypeAdapter(RawMessageStreamEvent)


@pytest.fixture(scope="module")
def client(api_server):
    return anthropic.Anthropic(base_url=api_server.url, api_key="unused", max_retries=0, timeout=60)


def plain(content):
    """Content blocks as plain dicts of what the server sent (the stream helper's blocks are
    parsed subclasses with extra fields)."""
    keys = ("type", "text", "thinking", "id", "name", "input")
    return [{k: getattr(b, k) for k in keys if getattr(b, k, None) is not None} for b in content]


def raw_events(url, body):
    """POSTs a streaming request; returns (event name, data) pairs as sent on the wire."""
    r = requests.post(url + "/v1/messages", json={**body, "stream": True}, stream=True, timeout=60)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    events = []
    for block in r.text.split("\n\n"):
        if block.strip():
            name, data = block.split("\n")
            assert name.startswith("event: ") and data.startswith("data: "), block
            events.append((name[len("event: "):], json.loads(data[len("data: "):])))
    return events


def check_stream_grammar(events):
    """Each event parses as the SDK's typed event and names itself; blocks start, take deltas
    and stop in index order; message_start first, message_delta then message_stop last."""
    for name, data in events:
        if name != "ping":
            assert EVENTS.validate_python(data).type == name == data["type"]
    names = [n for n, _ in events if n != "ping"]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    open_index, next_index = None, 0
    for name, data in events:
        if name == "content_block_start":
            assert open_index is None and data["index"] == next_index
            open_index = data["index"]
        elif name == "content_block_delta":
            assert data["index"] == open_index
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index, next_index = None, next_index + 1
    assert open_index is None
    return Message.model_validate(events[0][1]["message"])


def test_create_and_stream_agree_for_a_seed(client, api_server):
    kw = dict(model=MODEL, max_tokens=16, messages=USER, system="Answer briefly.")
    sampling = {"temperature": 0.9, "top_p": 0.95, "top_k": 40, "seed": 11}
    whole = client.messages.create(**kw, extra_body=sampling)
    assert whole.type == "message" and whole.role == "assistant" and whole.id.startswith("msg_")
    assert whole.model == MODEL and whole.content[0].type == "text" and whole.content[0].text
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.usage.output_tokens <= 16
    with client.messages.stream(**kw, extra_body=sampling) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == whole.content[0].text
    assert plain(final.content) == plain(whole.content) and final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    # Anthropic counts cache reads apart: input + cache reads is the whole prompt, every time.
    assert (final.usage.input_tokens + final.usage.cache_read_input_tokens
            == whole.usage.input_tokens + whole.usage.cache_read_input_tokens)
    start = check_stream_grammar(raw_events(api_server.url, {**kw, **sampling}))
    assert start.usage.input_tokens == whole.usage.input_tokens + whole.usage.cache_read_input_tokens


def test_max_tokens_and_stop_sequences(client):
    cut = client.messages.create(model=MODEL, max_tokens=3, messages=USER, extra_body={"temperature": 0})
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    greedy = client.messages.create(model=MODEL, max_tokens=16, messages=USER, extra_body={"temperature": 0})
    text = greedy.content[0].text
    stop = text.split()[1]  # a word the greedy answer writes
    r = client.messages.create(model=MODEL, max_tokens=16, messages=USER, stop_sequences=[stop],
                               extra_body={"temperature": 0})
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert r.content[0].text == text[:text.index(stop)]
    with client.messages.stream(model=MODEL, max_tokens=16, messages=USER, stop_sequences=[stop],
                                extra_body={"temperature": 0}) as s:
        final = s.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    assert plain(final.content) == plain(r.content)


def test_tool_use_and_tool_result_turn(client, api_server):
    kw = dict(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "What time is it?"}],
              tools=[TIME_TOOL], tool_choice={"type": "tool", "name": "get_time"})
    steer = {"temperature": 0, "logit_bias": STEER_EMPTY_ARGS}
    r = client.messages.create(**kw, extra_body=steer)
    uses = [b for b in r.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_time" and uses[0].input == {}
    assert r.stop_reason == "tool_use"
    with client.messages.stream(**kw, extra_body=steer) as s:
        final = s.get_final_message()
    assert [(b.type, b.name, b.input) for b in final.content if b.type == "tool_use"] == [("tool_use", "get_time", {})]
    events = raw_events(api_server.url, {**kw, **steer})
    check_stream_grammar(events)
    partial = [d["delta"]["partial_json"] for n, d in events
               if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"]
    assert json.loads("".join(partial)) == {}
    # The tool's result goes back as a tool_result block; the turn is the same conversation
    # chat completions would run (same prompt tokens).
    follow = client.messages.create(
        model=MODEL, max_tokens=8, tools=[TIME_TOOL], extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "What time is it?"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": uses[0].id, "name": "get_time",
                                                     "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "12:30"}]}])
    chat = requests.post(api_server.url + "/v1/chat/completions", timeout=60, json={
        "model": MODEL, "max_tokens": 8, "temperature": 0,
        "tools": [{"type": "function", "function": {"name": "get_time", "description": "Current time",
                                                     "parameters": TIME_TOOL["input_schema"]}}],
        "messages": [{"role": "user", "content": "What time is it?"},
                     {"role": "assistant", "content": "", "tool_calls": [
                         {"id": uses[0].id, "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": uses[0].id, "content": "12:30"}]}).json()
    assert follow.usage.input_tokens + follow.usage.cache_read_input_tokens == chat["usage"]["prompt_tokens"]
    follow_text = "".join(b.text for b in follow.content if b.type == "text")
    assert follow_text == (chat["choices"][0]["message"]["content"] or "")


def test_count_tokens_is_the_prompt_the_model_reads(client):
    kw = dict(model=MODEL, messages=USER, system="Answer briefly.", tools=[TIME_TOOL])
    counted = client.messages.count_tokens(**kw)
    r = client.messages.create(max_tokens=1, **kw, extra_body={"temperature": 0})
    assert counted.input_tokens == r.usage.input_tokens + r.usage.cache_read_input_tokens
    assert client.messages.count_tokens(model=MODEL, messages=USER).input_tokens < counted.input_tokens


def test_errors_raise_the_sdk_exceptions_in_anthropic_shape(client, api_server):
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="claude-unknown-model", max_tokens=2, messages=USER)
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "not_found_error"
    assert "claude-unknown-model" in e.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=MODEL, max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_unknown", "content": "x"}]}])
    assert e.value.body["error"]["type"] == "invalid_request_error" and "toolu_unknown" in e.value.body["error"]["message"]
    r = requests.post(api_server.url + "/v1/messages", json={"model": MODEL, "messages": USER}, timeout=30)
    assert r.status_code == 400 and r.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "'max_tokens' is required"}}


def test_x_api_key_and_bearer_are_both_accepted():
    with Server(settings={**API_SETTINGS, "server.api_keys": ["sk-test-12345678"]}) as s:
        s.wait_ready()
        with pytest.raises(anthropic.AuthenticationError) as e:
            anthropic.Anthropic(base_url=s.url, api_key="wrong-key", max_retries=0).messages.create(
                model=MODEL, max_tokens=1, messages=USER)
        assert e.value.body["error"]["type"] == "authentication_error"
        ok = anthropic.Anthropic(base_url=s.url, api_key="sk-test-12345678", max_retries=0)  # sends x-api-key
        assert ok.messages.create(model=MODEL, max_tokens=1, messages=USER).usage.output_tokens == 1
        assert ok.messages.count_tokens(model=MODEL, messages=USER).input_tokens > 0
        bearer = requests.post(s.url + "/v1/messages", headers={"Authorization": "Bearer sk-test-12345678"},
                               json={"model": MODEL, "max_tokens": 1, "messages": USER}, timeout=30)
        assert bearer.status_code == 200
