"""A model served with Qwen3-Coder's chat template (tests/fixtures/templates/qwen3_coder) gets the
qwen3_xml tool-call format: tool_choice auto, required and a named function are all answered,
streaming and not, with the tools listed in the prompt; a forced call opens in the prompt and
its rest is held to the grammar, so its arguments follow the function's schema."""
import json

import jsonschema
import pytest
import requests

from conftest import FIXTURES, Server, model_id

MODEL = model_id()
TEMPLATE = FIXTURES / "templates" / "qwen3_coder" / "chat_template.jinja"
TOOLS = [{"type": "function", "function": {"name": "list_dir", "description": "List a folder.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "depth": {"type": "integer"}}, "required": ["path"]}}}]
QUESTION = [{"role": "user", "content": "What is in /tmp?"}]


@pytest.fixture(scope="module")
def coder_server():
    with Server(settings={"model.chat_template": str(TEMPLATE)}) as s:
        yield s.wait_ready()


def constraint_requests(url):
    """All constraints compiled so far, of every kind."""
    text = requests.get(url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("sparkd_structured_output_requests_total"))


def chat(url, **kw):
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 8, "temperature": 0, **kw}
    return requests.post(url + "/v1/chat/completions", json=body, timeout=120)


@pytest.mark.parametrize("tool_choice", ["auto", "required", {"type": "function", "function": {"name": "list_dir"}}])
def test_tool_choices_are_answered_and_forced_calls_follow_the_schema(coder_server, tool_choice):
    before = constraint_requests(coder_server.url)
    forced = tool_choice != "auto"
    r = chat(coder_server.url, tools=TOOLS, tool_choice=tool_choice, max_tokens=120 if forced else 8)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert message["role"] == "assistant"
    for call in message.get("tool_calls") or []:  # whatever the tiny model writes must be well formed
        assert call["function"]["name"] and isinstance(json.loads(call["function"]["arguments"]), dict)
    if forced:  # held to the grammar: a call to list_dir whose arguments follow its schema
        assert r.json()["choices"][0]["finish_reason"] == "tool_calls", r.text
        (call,) = message["tool_calls"]
        assert call["function"]["name"] == "list_dir"
        jsonschema.validate(json.loads(call["function"]["arguments"]), TOOLS[0]["function"]["parameters"])
    stream = chat(coder_server.url, tools=TOOLS, tool_choice=tool_choice, stream=True)
    assert stream.status_code == 200 and stream.text.rstrip().endswith("data: [DONE]"), stream.text
    assert constraint_requests(coder_server.url) == before + 2  # auto: each call the model opens


def test_tools_are_listed_in_the_prompt(coder_server):
    plain = chat(coder_server.url).json()["usage"]["prompt_tokens"]
    with_tools = chat(coder_server.url, tools=TOOLS).json()["usage"]["prompt_tokens"]
    assert with_tools > plain + 100  # the template's <tools> listing and its format instructions
