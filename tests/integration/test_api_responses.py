"""The official openai SDK's Responses API against sparkd: whole and streamed answers (every
event validated against the SDK's own typed event models), function tools and a
function_call_output turn, previous_response_id chains, and errors as the SDK's exceptions."""
import json

import openai
import pytest
import requests
from pydantic import TypeAdapter
from openai.types.responses import Response, ResponseStreamEvent

from conftest import model_id

MODEL = model_id()
TIME_TOOL = {"type": "function", "name": "get_time", "description": "Current time",
             "parameters": {"type": "object", "properties": {}}}
# SmolLM2 token ids of "{}" and "}" (as in test_api_openai.py): with the call to get_time
# forced, the prompt ends in '<tool_call>\n{"name": "get_time", "arguments": ' and this bias
# makes the model close the call with '{}' '}'.
STEER_EMPTY_ARGS = {"6150": 100, "109": 100}
EVENTS = TypeAdapter(ResponseStreamEvent)


@pytest.fixture(scope="module")
def client(api_server):
    return openai.OpenAI(base_url=api_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def raw_events(url, body):
    """POSTs a streaming request; returns (event name, data) pairs as sent on the wire."""
    r = requests.post(url + "/v1/responses", json={**body, "stream": True}, stream=True, timeout=60)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    events = []
    for block in r.text.split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        events.append((lines[0][len("event: "):], json.loads(lines[1][len("data: "):])))
    return events


def check_stream_grammar(events):
    """Each event parses strictly as the SDK's typed event; names, types and sequence numbers
    agree; items open before their deltas and close after them; the stream ends completed."""
    types = []
    for i, (name, data) in enumerate(events):
        parsed = EVENTS.validate_python(data)  # raises on a field the SDK cannot parse
        assert parsed.type == name == data["type"]
        assert data["sequence_number"] == i
        types.append(name)
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed" and types.count("response.completed") == 1
    open_items = set()
    for name, data in events:
        if name == "response.output_item.added":
            open_items.add(data["output_index"])
        elif name == "response.output_item.done":
            open_items.remove(data["output_index"])
        elif "delta" in name or name.endswith(".done") and "output_index" in data:
            assert data["output_index"] in open_items, name
    assert not open_items
    return Response.model_validate(events[-1][1]["response"])


def test_whole_and_streamed_answers_agree_for_a_seed(client, api_server):
    kw = dict(model=MODEL, input="Tell me about the sea.", instructions="Answer briefly.", max_output_tokens=16,
              temperature=0.9, top_p=0.95)
    whole = client.responses.create(**kw, extra_body={"seed": 7})
    assert whole.object == "response" and whole.id.startswith("resp_") and whole.model == MODEL
    assert whole.status in ("completed", "incomplete") and whole.output_text
    assert whole.instructions == "Answer briefly." and whole.max_output_tokens == 16
    assert whole.usage.output_tokens <= 16 and whole.usage.input_tokens > 10
    assert whole.usage.total_tokens == whole.usage.input_tokens + whole.usage.output_tokens
    with client.responses.stream(**kw, extra_body={"seed": 7}) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == whole.output_text
    assert final.output_text == whole.output_text and final.status == whole.status
    assert [(o.type, o.status) for o in final.output] == [(o.type, o.status) for o in whole.output]
    assert final.usage.output_tokens == whole.usage.output_tokens
    # The same stream on the wire, each event checked against the SDK's models.
    body = {"model": MODEL, "input": "Tell me about the sea.", "instructions": "Answer briefly.",
            "max_output_tokens": 16, "temperature": 0.9, "top_p": 0.95, "seed": 7}
    streamed = check_stream_grammar(raw_events(api_server.url, body))
    assert streamed.output_text == whole.output_text


def test_length_cut_is_incomplete(client):
    r = client.responses.create(model=MODEL, input="Count from one to fifty.", max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and r.usage.output_tokens == 3


def test_function_call_and_its_output_turn(client, api_server):
    kw = dict(model=MODEL, input=[{"role": "user", "content": "What time is it?"}], tools=[TIME_TOOL],
              tool_choice={"type": "function", "name": "get_time"}, max_output_tokens=2, temperature=0)
    r = client.responses.create(**kw, extra_body={"logit_bias": STEER_EMPTY_ARGS})
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    call = calls[0]
    assert call.name == "get_time" and json.loads(call.arguments) == {} and call.call_id.startswith("call_")
    assert r.status == "completed" and r.tools[0].name == "get_time"
    # Streamed: the arguments arrive as function_call_arguments events of the same item.
    events = raw_events(api_server.url, {**kw, "logit_bias": STEER_EMPTY_ARGS})
    streamed = check_stream_grammar(events)
    assert [(o.type, o.name, o.arguments) for o in streamed.output] == [("function_call", "get_time", "{}")]
    args = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    assert args == "{}"
    # The next turn hands the call's output back.
    follow = client.responses.create(
        model=MODEL, tools=[TIME_TOOL], max_output_tokens=8, temperature=0,
        input=[{"role": "user", "content": "What time is it?"},
               {"type": "function_call", "call_id": call.call_id, "name": "get_time", "arguments": "{}"},
               {"type": "function_call_output", "call_id": call.call_id, "output": "12:30"}])
    assert follow.status in ("completed", "incomplete") and follow.output
    # It is the same conversation as chat completions spell it: same prompt, same answer.
    chat = client.chat.completions.create(
        model=MODEL, max_tokens=8, temperature=0,
        tools=[{"type": "function", "function": {k: v for k, v in TIME_TOOL.items() if k != "type"}}],
        messages=[{"role": "user", "content": "What time is it?"},
                  {"role": "assistant", "content": "", "tool_calls": [{"id": call.call_id, "type": "function",
                                                                      "function": {"name": "get_time", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": call.call_id, "content": "12:30"}])
    assert follow.usage.input_tokens == chat.usage.prompt_tokens
    assert follow.output_text == (chat.choices[0].message.content or "")


def test_previous_response_id_continues_the_conversation(client):
    first = client.responses.create(model=MODEL, input="My name is Ada.", max_output_tokens=6, temperature=0)
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="What is my name?",
                                     max_output_tokens=6, temperature=0)
    assert second.previous_response_id == first.id
    # The same conversation spelled out in full renders the same prompt and answer.
    explicit = client.responses.create(
        model=MODEL, max_output_tokens=6, temperature=0,
        input=[{"role": "user", "content": "My name is Ada."},
               {"role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
               {"role": "user", "content": "What is my name?"}])
    assert second.usage.input_tokens == explicit.usage.input_tokens
    assert second.output_text == explicit.output_text
    # A chain of three: the third turn sees both earlier ones.
    third = client.responses.create(model=MODEL, previous_response_id=second.id, input="Thanks.",
                                    max_output_tokens=4, temperature=0)
    assert third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens


def test_unknown_or_unstored_previous_response_is_404(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(model=MODEL, previous_response_id="resp_nope", input="hi", max_output_tokens=2)
    assert "resp_nope" in e.value.message and e.value.param == "previous_response_id"
    unstored = client.responses.create(model=MODEL, input="hi", max_output_tokens=2, store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, previous_response_id=unstored.id, input="hi", max_output_tokens=2)


def test_errors_raise_the_sdk_exceptions(client):
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="gpt-5", input="hi", max_output_tokens=2)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", max_output_tokens=2, text={"format": {
            "type": "json_schema", "name": "x", "schema": {"type": "object", "minProperties": 1}}})
    assert e.value.param == "text.format" and "minProperties" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=MODEL, input="hi", tools=[{"type": "web_search"}])
    assert e.value.param == "tools"
