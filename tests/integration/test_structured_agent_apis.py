"""Structured outputs and forced tool calls through the agent APIs: the Responses API's
text.format and tool_choice, and the Messages API's output_config and tool_choice, with the
official openai and anthropic SDKs against the real server (SmolLM2) and jsonschema as the
judge. SmolLM2 on its own writes prose here, so these fail when the constraint is not applied.
"""
import json

import anthropic
import openai
import pytest

from conftest import model_id
from test_structured_output import MAX_TOKENS, check

MODEL_ID = model_id()
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "celsius": {"type": "integer"}, "sunny": {"type": "boolean"}},
           "required": ["city", "celsius", "sunny"], "additionalProperties": False}
ASK = "What is the weather in Oslo?"
# Bounded strings, so a forced call always fits in MAX_TOKENS and an unfinished one is a failure.
TOOL_SCHEMAS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                     "unit": {"enum": ["celsius", "fahrenheit"]},
                                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                    "required": ["city", "unit", "days"]},
    "send_email": {"type": "object", "properties": {"to": {"type": "string", "maxLength": 40},
                                                    "urgent": {"type": "boolean"}}, "required": ["to"]},
}


@pytest.fixture(scope="module")
def clients(server):
    return (openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600),
            anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=600))


def test_responses_text_format_json_schema(clients):
    oai, _ = clients
    for stream in (False, True):
        kwargs = dict(model=MODEL_ID, input=ASK, max_output_tokens=MAX_TOKENS, temperature=0,
                      text={"format": {"type": "json_schema", "name": "weather", "schema": WEATHER, "strict": True}})
        if stream:
            with oai.responses.stream(**kwargs) as s:
                r = s.get_final_response()
        else:
            r = oai.responses.create(**kwargs)
        assert r.status == "completed", r
        check(WEATHER, r.output_text)
    # json_object bounds no string, so a sampled object may run past MAX_TOKENS (2 seeds in 12
    # here): such an answer must stop on the token limit, and every finished one must parse.
    finished = 0
    for seed in range(4):
        r = oai.responses.create(model=MODEL_ID, input=ASK, max_output_tokens=MAX_TOKENS, temperature=1.0,
                                 text={"format": {"type": "json_object"}}, extra_body={"seed": seed})
        if r.status == "incomplete":
            assert r.incomplete_details.reason == "max_output_tokens", r
            continue
        assert r.status == "completed" and isinstance(check({"type": "object"}, r.output_text), dict)
        finished += 1
    assert finished >= 2


def test_responses_tool_choice_required(clients):
    oai, _ = clients
    tools = [{"type": "function", "name": name, "parameters": schema} for name, schema in TOOL_SCHEMAS.items()]
    for seed in range(3):
        r = oai.responses.create(model=MODEL_ID, input="Weather in Rome this week?", tools=tools, tool_choice="required",
                                 temperature=1.0, max_output_tokens=MAX_TOKENS, extra_body={"seed": seed})
        calls = [o for o in r.output if o.type == "function_call"]
        assert calls, r.output
        check(TOOL_SCHEMAS[calls[0].name], calls[0].arguments)


def test_messages_output_config_json_schema(clients):
    _, claude = clients
    m = claude.messages.create(model=MODEL_ID, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": ASK}],
                               extra_body={"temperature": 0,
                                           "output_config": {"format": {"type": "json_schema", "schema": WEATHER}}})
    assert m.stop_reason == "end_turn", m
    check(WEATHER, m.content[0].text)


def test_messages_tool_choice_any(clients):
    _, claude = clients
    tools = [{"name": name, "input_schema": schema} for name, schema in TOOL_SCHEMAS.items()]
    for temperature in (0.0, 1.0):
        m = claude.messages.create(model=MODEL_ID, max_tokens=MAX_TOKENS, tools=tools, tool_choice={"type": "any"},
                                   messages=[{"role": "user", "content": "Weather in Rome this week?"}],
                                   extra_body={"temperature": temperature})
        assert m.stop_reason == "tool_use", m
        use = next(b for b in m.content if b.type == "tool_use")
        check(TOOL_SCHEMAS[use.name], json.dumps(use.input))


def test_bad_formats_name_the_field(clients):
    oai, claude = clients
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=MODEL_ID, input="hi", max_output_tokens=2,
                             text={"format": {"type": "json_schema", "name": "x",
                                              "schema": {"type": "array", "uniqueItems": True}}})
    assert e.value.param == "text.format" and "uniqueItems" in e.value.message
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=MODEL_ID, max_tokens=2, messages=[{"role": "user", "content": "hi"}],
                               extra_body={"output_config": {"format": {"type": "json_schema",
                                                                        "schema": {"type": "array", "uniqueItems": True}}}})
    assert "uniqueItems" in str(e.value)
