"""Reasoning on the agents' routes: a chat template that opens <think> (as Qwen3's does) makes
the model's text reasoning, which the Responses API returns as a reasoning item and the
Messages API as a thinking block; switching thinking off (reasoning.effort "none",
thinking.type "disabled") turns the same text into an ordinary answer."""
import json

import anthropic
import openai
import pytest
import requests
from pydantic import TypeAdapter
from anthropic.types import RawMessageStreamEvent
from openai.types.responses import ResponseStreamEvent

from conftest import API_SETTINGS, Server, model_id

MODEL = model_id()
# ChatML with a thinking switch, the shape of Qwen3's template: the answer starts inside
# <think> unless enable_thinking is false.
THINKING_TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is not defined or enable_thinking %}<think>\n{% endif %}{% endif %}")
QUESTION = "Why is the sky blue?"


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "chat_template.jinja"
    template.write_text(THINKING_TEMPLATE)
    with Server(settings={**API_SETTINGS, "model.chat_template": str(template)}) as s:
        yield s.wait_ready()


def sse_events(response):
    out = []
    for block in response.text.split("\n\n"):
        if block.strip():
            name, data = block.split("\n")
            out.append((name[len("event: "):], json.loads(data[len("data: "):])))
    return out


def test_responses_reasoning_item(thinking_server):
    client = openai.OpenAI(base_url=thinking_server.url + "/v1", api_key="unused", max_retries=0)
    kw = dict(model=MODEL, input=QUESTION, max_output_tokens=10, temperature=0)
    r = client.responses.create(**kw)
    assert [o.type for o in r.output] == ["reasoning"]
    thought = r.output[0].content[0].text
    assert thought and r.output[0].content[0].type == "reasoning_text" and r.output_text == ""
    assert 0 < r.usage.output_tokens_details.reasoning_tokens <= r.usage.output_tokens
    wire = requests.post(thinking_server.url + "/v1/responses", json={**kw, "stream": True}, timeout=60)
    events = sse_events(wire)
    adapter = TypeAdapter(ResponseStreamEvent)
    for _, data in events:
        adapter.validate_python(data)
    assert "".join(d["delta"] for n, d in events if n == "response.reasoning_text.delta") == thought
    assert not [n for n, _ in events if n == "response.output_text.delta"]
    # Without thinking the same model answers in a message.
    plain = client.responses.create(**kw, reasoning={"effort": "none"})
    assert [o.type for o in plain.output] == ["message"] and plain.output_text
    assert plain.usage.output_tokens_details.reasoning_tokens == 0


def test_messages_thinking_block(thinking_server):
    client = anthropic.Anthropic(base_url=thinking_server.url, api_key="unused", max_retries=0)
    kw = dict(model=MODEL, max_tokens=10, messages=[{"role": "user", "content": QUESTION}],
              extra_body={"temperature": 0})
    r = client.messages.create(**kw, thinking={"type": "enabled", "budget_tokens": 1024})
    assert [b.type for b in r.content] == ["thinking"] and r.content[0].thinking
    with client.messages.stream(**kw, thinking={"type": "enabled", "budget_tokens": 1024}) as s:
        final = s.get_final_message()
    assert [(b.type, b.thinking) for b in final.content] == [("thinking", r.content[0].thinking)]
    wire = requests.post(thinking_server.url + "/v1/messages", timeout=60, json={
        "model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": QUESTION}], "temperature": 0,
        "stream": True})
    events = sse_events(wire)
    adapter = TypeAdapter(RawMessageStreamEvent)
    for name, data in events:
        if name != "ping":
            adapter.validate_python(data)
    thinking = "".join(d["delta"]["thinking"] for n, d in events
                       if n == "content_block_delta" and d["delta"]["type"] == "thinking_delta")
    assert thinking == r.content[0].thinking
    off = client.messages.create(**kw, thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"] and off.content[0].text
