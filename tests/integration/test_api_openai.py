"""The official openai SDK against sparkd: chat and completions, streamed and not, n > 1,
logprobs, stop strings, seeds, tool calls, and errors raised as the SDK's exception classes."""
import json

import openai
import pytest
import requests

from conftest import API_SETTINGS, Server, model_id

pytestmark = pytest.mark.cuda_path  # also runs against the emulated CUDA server (conftest.py)

MODEL = model_id()
USER = [{"role": "user", "content": "Name three colors."}]
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def client(api_server):
    return openai.OpenAI(base_url=api_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_models_lists_the_served_model(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_chat_non_streaming(client):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=8, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == MODEL
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content
    assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The same prompt again: its full KV blocks come from the prefix cache (16-token blocks;
    # the last prompt token is always computed).
    again = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=1, temperature=0)
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached == (r.usage.prompt_tokens - 1) // 16 * 16 and cached > 0, cached


def test_chat_streaming_equals_non_streaming_greedy(client):
    whole = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=12, temperature=0)
    stream = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == whole.choices[0].message.content
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_streamed_and_not(client):
    r = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    s = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0,
                                  stream=True)
    assert "".join(c.choices[0].text for c in s) == r.choices[0].text


def test_completions_echo_and_token_id_prompts(client, api_server):
    r = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=3, temperature=0, echo=True)
    assert r.choices[0].text.startswith("Hello there")
    ids = requests.post(api_server.url + "/tokenize", json={"prompt": "Hello there"}, timeout=30).json()["tokens"]
    r2 = client.completions.create(model=MODEL, prompt=ids, max_tokens=3, temperature=0)
    r3 = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=3, temperature=0)
    assert r2.choices[0].text == r3.choices[0].text


def test_n_choices_and_multiple_prompts(client):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6, n=3, temperature=1.0, seed=11)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.message.content is not None for c in r.choices)
    r = client.completions.create(model=MODEL, prompt=["One", "Two"], max_tokens=3, n=2, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.choices[0].text == r.choices[1].text  # greedy: both choices of a prompt agree
    s = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=5, n=2, stream=True, temperature=0)
    texts = {0: "", 1: ""}
    for chunk in s:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts[0] == texts[1] and texts[0]


def test_seed_reproduces_sampled_text(client):
    kw = dict(model=MODEL, messages=USER, max_tokens=10, temperature=1.0, top_p=0.95)
    a = client.chat.completions.create(seed=1234, **kw).choices[0].message.content
    b = client.chat.completions.create(seed=1234, **kw).choices[0].message.content
    assert a == b
    others = {client.chat.completions.create(seed=s, **kw).choices[0].message.content for s in (1, 2, 3, 4)}
    assert len(others | {a}) > 1, "different seeds never changed the text"


def test_logprobs_chat_and_legacy(client):
    r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, temperature=0, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 3
        assert item.top_logprobs[0].logprob >= item.top_logprobs[-1].logprob
        assert item.token == item.top_logprobs[0].token  # greedy picks the most likely
        assert bytes(item.bytes).decode("utf-8", "replace") == item.token
    r = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 4
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0 and all(len(t) == 2 for t in lp.top_logprobs)
    s = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=4, temperature=0, logprobs=True,
                                       stream=True)
    streamed = [i.token for c in s if c.choices and c.choices[0].logprobs for i in c.choices[0].logprobs.content]
    assert streamed == [i.token for i in content]


def test_stop_strings_cut_the_text(client):
    base = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0).choices[0].text
    words = base.split()
    assert len(words) >= 3, base
    stop = words[2]
    r = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=[stop, "zzz"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base[:base.index(stop)]
    s = client.completions.create(model=MODEL, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, stop=stop,
                                  stream=True)
    assert "".join(c.choices[0].text for c in s) == r.choices[0].text


TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "The current time", "parameters": {"type": "object", "properties": {}}}}
# SmolLM2 token ids of "{}" and "}": with tool_choice naming get_time, the prompt already
# holds '<tool_call>\n{"name": "get_time", "arguments": ' and this bias steers the model's
# two tokens to '{}' '}', closing the call; the parser and the API do the rest for real.
STEER_EMPTY_ARGS = {"6150": 100, "109": 100}


def test_tool_call_named_is_parsed_streamed_and_not(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "What time is it?"}], tools=[TIME_TOOL],
              tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=2, temperature=0,
              logit_bias=STEER_EMPTY_ARGS)
    r = client.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert msg.tool_calls, f"no tool call parsed from {msg.content!r}"
    assert msg.content is None
    call = msg.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_time" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {}
    assert r.choices[0].finish_reason == "tool_calls"
    s = client.chat.completions.create(stream=True, **kw)
    calls = {}
    finish = None
    for chunk in s:
        for c in chunk.choices:
            for d in c.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = d.id or entry["id"]
                entry["name"] += (d.function.name or "") if d.function else ""
                entry["arguments"] += (d.function.arguments or "") if d.function else ""
            finish = c.finish_reason or finish
    assert list(calls) == [0]
    assert calls[0]["name"] == "get_time" and calls[0]["id"].startswith("call_")
    assert json.loads(calls[0]["arguments"]) == {}
    assert finish == "tool_calls"


def test_tool_call_auto_with_tool_results_in_history(client):
    # A full tool round trip in the history renders and answers (auto: the model may or may
    # not call again; what it writes must come back as either content or parsed calls).
    messages = [{"role": "user", "content": "What time is it?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12:30"}]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=[TIME_TOOL], max_tokens=6,
                                       temperature=0)
    m = r.choices[0].message
    assert (m.content is not None) or m.tool_calls


# SmolLM2 token ids of 'get_time", "arguments": {}}\n</tool_call>': with tool_choice
# "required" the prompt already holds '<tool_call>\n{"name": "'; biased towards these tokens
# the model completes a call (it names it "time_get_time": names are not constrained).
STEER_TIME_CALL = {str(i): 100 for i in (726, 79, 2256, 1002, 476, 24370, 1799, 4548, 109, 198, 9617, 19324, 4350, 46)}


def test_tool_call_required_and_none(client):
    kw = dict(model=MODEL, messages=[{"role": "user", "content": "What time is it?"}], tools=[TIME_TOOL],
              max_tokens=24, temperature=0, stop=["</tool_call>"], logit_bias=STEER_TIME_CALL)
    r = client.chat.completions.create(tool_choice="required", **kw)
    msg = r.choices[0].message
    assert msg.tool_calls, f"no tool call parsed from {msg.content!r}"
    assert msg.content is None and r.choices[0].finish_reason == "tool_calls"
    assert len(msg.tool_calls) == 1 and msg.tool_calls[0].function.name
    assert json.loads(msg.tool_calls[0].function.arguments) == {}
    # "none" hides the tools from the prompt (it counts the same tokens as no tools at all),
    # and the same steered text is not parsed as a call.
    r = client.chat.completions.create(tool_choice="none", **kw)
    assert not r.choices[0].message.tool_calls and r.choices[0].finish_reason != "tool_calls"
    without = client.chat.completions.create(**{k: v for k, v in kw.items() if k != "tools"})
    assert r.usage.prompt_tokens == without.usage.prompt_tokens


def test_errors_raise_the_sdk_exceptions(client, api_server):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=USER, max_tokens=2)
    assert "gpt-4o" in e.value.message and e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=USER, max_tokens=2, temperature=5)
    assert e.value.param == "temperature" and "temperature" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[], max_tokens=2)
    assert e.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="hi " * 500, max_tokens=10)
    assert "maximum context length is 384 tokens" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=USER, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "hostname"}}})
    assert e.value.param == "response_format" and "hostname" in e.value.message


def test_authentication_error_with_api_keys():
    s = Server(settings={**API_SETTINGS, "engine.max_num_seqs": 4, "server.api_keys": ["k-0123456789"]}).wait_ready()
    try:
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong-key-000", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as e:
            bad.models.list()
        assert "API key" in e.value.message
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="k-0123456789", max_retries=0)
        assert good.models.list().data[0].id == MODEL
    finally:
        s.stop()


def test_rate_limit_error_when_the_queue_is_full():
    s = Server(settings={**API_SETTINGS, "engine.max_num_seqs": 1, "server.max_queued_requests": 0}).wait_ready()
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=60)
        long = c.completions.create(model=MODEL, prompt="Count:", max_tokens=300, temperature=0, stream=True,
                                    extra_body={"ignore_eos": True})
        next(iter(long))  # running: the only slot is taken
        with pytest.raises(openai.RateLimitError) as e:
            c.completions.create(model=MODEL, prompt="hi", max_tokens=2)
        assert "busy" in e.value.message
        long.close()
    finally:
        s.stop()
