"""Nemotron-3's chat format end to end: the tiny Nemotron-H served with the chat template
NVIDIA publishes with Nemotron-3-Nano (tests/fixtures/templates/nemotron_3_nano, CRLF line
ends as published), answers forced through the test build's hook
(SPARKD_TEST_FORCED_TOKENS, engine/util/test_hooks.h) as the real model writes them.

- The template is detected as Qwen3-Coder's XML format (qwen3_xml) and as a thinking one.
- With thinking on (the template's default) the prompt opens <think>; the answer's
  reasoning comes back as reasoning_content, and its <tool_call><function=...> calls as
  tool_calls whose bare parameter values are typed back by each parameter's schema
  (integer, boolean, object, array, a nullable string written as None, a string that looks
  like a number), whole and streamed alike.
- With enable_thinking false the prompt closes an empty <think></think> and the answer is
  content and calls only.
- Turn two: the assistant turn sent back (reasoning_content, tool_calls with arguments as a
  JSON string, as OpenAI clients send them) and the tool result are rendered as jinja2
  renders them (the prompt's token count equals that of the reference's text).

The tokenizer spells printable ASCII and newline one character a token, with <|im_start|> and
<|im_end|> (the end of a turn: the EOS) as special tokens; so the forced ids are the
answer's characters.
"""
import json

import openai
import pytest
import requests

from conftest import FIXTURES, SPARKD_TEST_HOOKS, Server, assemble_chat_stream, character_chat_model
import gen_template_golden as reference


TEMPLATE = FIXTURES / "templates" / "nemotron_3_nano" / "chat_template.jinja"
EOS, IM_START = 2, 3
SPECIAL = {"<|im_end|>": EOS, "<|im_start|>": IM_START}
MAX_LEN = 4096  # the template's tool instructions alone are ~1,400 characters, a token each

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city.",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "metric": {"type": "boolean"},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
        "hours": {"type": "array", "items": {"type": "integer"}},
        "note": {"type": ["string", "null"]},
        "zip": {"type": "string"}}}}}]
CALL_XML = ("<tool_call>\n<function=get_weather>\n"
            "<parameter=city>\nSan Jose\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n"
            "<parameter=metric>\ntrue\n</parameter>\n"
            "<parameter=where>\n{\"lat\": 37.3}\n</parameter>\n"
            "<parameter=hours>\n[6, 18]\n</parameter>\n"
            "<parameter=note>\nNone\n</parameter>\n"
            "<parameter=zip>\n95112\n</parameter>\n"
            "</function>\n</tool_call>\n")
CALL_ARGUMENTS = {"city": "San Jose", "days": 3, "metric": True, "where": {"lat": 37.3}, "hours": [6, 18],
                  "note": None, "zip": "95112"}
REASONING = "The user wants the weather.\nI will call get_weather."
QUESTION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Weather in San Jose?"}]


def model_folder(tmp_path):
    """The tiny Nemotron-H as a chat model with Nemotron-3's markers and chat template."""
    return character_chat_model(tmp_path / "nemotron_h", SPECIAL, EOS, "<s>", "<|im_end|>", TEMPLATE, MAX_LEN)


def forced(text):
    """The ids of `text` (one a character) and the end of the turn."""
    assert all(ch == "\n" or 32 <= ord(ch) < 127 for ch in text)
    return ",".join(str(ord(ch)) for ch in text) + f",{EOS}"


def serve(tmp_path, answer):
    return Server({"model.max_model_len": MAX_LEN, "engine.max_num_seqs": 2}, model=model_folder(tmp_path),
                  binary=SPARKD_TEST_HOOKS, env={"SPARKD_TEST_FORCED_TOKENS": forced(answer)}).wait_ready()


def prompt_tokens(text):
    """The prompt's length in this tokenizer: a token a character, one for each marker."""
    return len(text) - sum(text.count(t) * (len(t) - 1) for t in SPECIAL)


def render(messages, **kwargs):
    """The reference: jinja2 under transformers' settings on the published template."""
    source = {"kind": "template_file", "path": "templates/nemotron_3_nano/chat_template.jinja",
              "bos_token": "<s>", "eos_token": "<|im_end|>"}
    status, text = reference.reference(source, {"messages": messages, "add_generation_prompt": True, **kwargs})
    assert status == "ok", text
    return text


def test_a_required_call_opens_in_the_prompt_the_qwen3_xml_way(tmp_path):
    """tool_choice "required" with thinking off: the format detected from the template (qwen3_xml)
    opens the call in the prompt ("<tool_call>\n<function="), after the template's empty
    <think></think>; the model writes the rest (forced here, so the grammar it is held to is
    not what this shows)."""
    prefill = "<tool_call>\n<function="
    s = serve(tmp_path, CALL_XML[len(prefill):])
    try:
        with client(s) as c:
            chat = c.chat.completions.create(model="nemotron_h", messages=QUESTION, tools=TOOLS, max_tokens=1000,
                                             tool_choice="required",
                                             extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        choice = chat.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert [(t.function.name, json.loads(t.function.arguments)) for t in choice.message.tool_calls] == \
            [("get_weather", CALL_ARGUMENTS)]
        # sparkd adds its instruction to the system turn, and the call's opening after the prompt.
        noted = [dict(QUESTION[0], content=QUESTION[0]["content"] + "\n\nYou must call at least one of the functions."),
                 QUESTION[1]]
        expected = render(noted, tools=TOOLS, enable_thinking=False)
        assert chat.usage.prompt_tokens == prompt_tokens(expected + prefill)
    finally:
        s.stop()


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory):
    s = serve(tmp_path_factory.mktemp("thinking"), REASONING + "\n</think>\n" + CALL_XML)
    yield s
    s.stop()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_reasoning_and_a_typed_call_whole_and_streamed(thinking_server):
    with client(thinking_server) as c:
        chat = c.chat.completions.create(model="nemotron_h", messages=QUESTION, tools=TOOLS, max_tokens=1000)
        choice = chat.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        assert (choice.message.model_extra or {}).get("reasoning_content", "").strip() == REASONING
        assert not (choice.message.content or "").strip(), choice.message.content
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == CALL_ARGUMENTS
        # The prompt is the reference's, thinking opened: "<|im_start|>assistant\n<think>\n".
        expected = render(QUESTION, tools=TOOLS)
        assert expected.endswith("<|im_start|>assistant\n<think>\n")
        assert chat.usage.prompt_tokens == prompt_tokens(expected)

        stream = c.chat.completions.create(model="nemotron_h", messages=QUESTION, tools=TOOLS, max_tokens=1000,
                                           stream=True)
        reasoning, content, calls, finish = assemble_chat_stream(stream)
        assert finish == "tool_calls" and reasoning.strip() == REASONING and not content.strip()
        assert [(n, json.loads(a)) for n, a in calls] == [("get_weather", CALL_ARGUMENTS)]


def test_turn_two_renders_as_jinja2_does(thinking_server):
    """The assistant's first turn sent back as an OpenAI client sends it (arguments as a JSON
    string, reasoning_content beside), the tool's result, a new user turn: the prompt sparkd
    builds has the reference's length, with the earlier reasoning truncated (the template's
    default) and kept (truncate_history_thinking false)."""
    turn = [{"role": "assistant", "content": None, "reasoning_content": REASONING,
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": json.dumps(CALL_ARGUMENTS)}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"sky\": \"clear\"}"},
            {"role": "assistant", "content": "Clear skies.", "reasoning_content": "Summarize it."},
            {"role": "user", "content": "And tomorrow?"}]
    as_objects = json.loads(json.dumps(turn))
    as_objects[0]["tool_calls"][0]["function"]["arguments"] = CALL_ARGUMENTS  # as a server hands them to the template
    for kwargs in ({}, {"truncate_history_thinking": False}):
        r = requests.post(thinking_server.url + "/v1/chat/completions", timeout=120, json={
            "messages": QUESTION + turn, "tools": TOOLS, "max_tokens": 1000, "chat_template_kwargs": kwargs})
        assert r.status_code == 200, r.text
        expected = render(QUESTION + as_objects, tools=TOOLS, **kwargs)
        assert (REASONING in expected) == bool(kwargs), expected  # the two cases differ
        assert r.json()["usage"]["prompt_tokens"] == prompt_tokens(expected), (kwargs, expected)


def test_thinking_off_gives_content_and_calls(tmp_path):
    s = serve(tmp_path, "Checking the weather.\n" + CALL_XML)
    try:
        with client(s) as c:
            for stream in (False, True):
                kw = dict(model="nemotron_h", messages=QUESTION, tools=TOOLS, max_tokens=1000,
                          extra_body={"chat_template_kwargs": {"enable_thinking": False}})
                if stream:
                    reasoning, content, calls, finish = assemble_chat_stream(c.chat.completions.create(stream=True, **kw))
                    calls = [(n, json.loads(a)) for n, a in calls]
                else:
                    chat = c.chat.completions.create(**kw)
                    m = chat.choices[0].message
                    reasoning, content, finish = (m.model_extra or {}).get("reasoning_content"), m.content, chat.choices[0].finish_reason
                    calls = [(t.function.name, json.loads(t.function.arguments)) for t in m.tool_calls]
                    expected = render(QUESTION, tools=TOOLS, enable_thinking=False)
                    assert expected.endswith("<|im_start|>assistant\n<think></think>")
                    assert chat.usage.prompt_tokens == prompt_tokens(expected)
                assert not reasoning, reasoning
                assert (content or "").strip() == "Checking the weather."
                assert calls == [("get_weather", CALL_ARGUMENTS)] and finish == "tool_calls"
    finally:
        s.stop()
