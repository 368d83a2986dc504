"""Gemma 4's chat format end to end: the tiny Nemotron-H served with the chat template Google
publishes with Gemma 4 (tests/fixtures/tokenizers/gemma4/chat_template.jinja), answers forced
through the test build's hook (SPARKD_TEST_FORCED_TOKENS, engine/util/test_hooks.h) as the
real model writes them.

- The template is detected as the gemma4 format: the answer is read with its special tokens.
- Every call the template itself writes reads back as the same call: an assistant turn with
  reasoning, calls of every JSON value type and content is rendered by jinja2 (transformers'
  settings), its model part is forced as the answer, and sparkd's reasoning_content,
  tool_calls and content are the turn's own, whole and streamed.
- With thinking off the prompt ends in the template's empty thought channel; the answer is
  content and calls only. <|tool_response> (the model handing over to a tool) ends it.
- Turn two: the calls and tool results sent back as OpenAI clients send them render as
  jinja2 renders them (the prompt's token count equals that of the reference's text).
- Forced calls (tool_choice "required" and a named function, thinking off) open in the prompt
  and the rest is held to the grammar of Gemma's argument notation: the random model, free
  to write anything, writes calls whose arguments validate against the tool's schema
  (jsonschema), every one of 100. Under "auto" every call the model opens is held the same.

The tokenizer spells printable ASCII and newline one character a token, with Gemma 4's
markers as special tokens and <turn|> (the end of a turn) as the EOS; so the forced ids are
the answer's characters and markers.
"""
import json
import re
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from conftest import FIXTURES, SPARKD_TEST_HOOKS, Server, assemble_chat_stream, character_chat_model
import gen_template_golden as reference

TEMPLATE_PATH = "tokenizers/gemma4/chat_template.jinja"
BOS, EOS = 1, 2
SPECIAL = {"<bos>": BOS, "<turn|>": EOS, "<|turn>": 3, "<|tool_call>": 4, "<tool_call|>": 5, "<|\"|>": 6,
           "<|channel>": 7, "<channel|>": 8, "<|tool_response>": 9, "<tool_response|>": 11, "<|tool>": 12,
           "<tool|>": 13, "<|think|>": 14}
MAX_LEN = 4096
SPECIAL_RE = re.compile("|".join(re.escape(t) for t in sorted(SPECIAL, key=len, reverse=True)))

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city.",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "The city"},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": "book_trip", "description": "Book a trip.",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"},
            "dates": {"type": "array", "items": {"type": "string"}},
            "rooms": {"type": "array", "items": {"type": "object", "properties": {"beds": {"type": "integer"}}}},
            "prefs": {"type": "object", "properties": {"window": {"type": "boolean"}}},
            "budget": {"type": "number", "nullable": True}}}}},
]
# Arguments of every kind the template prints: strings holding the notation's own
# punctuation and a marker, numbers (integer, negative, float, exponent), booleans, null,
# nested objects and lists, empty ones.
CALLS = [
    ("get_weather", {"city": "San Jose", "unit": "c", "days": 3}),
    ("book_trip", {"city": "Paris, France: {center} [left]", "dates": ["2025-01-02", "2025-01-05"],
                   "rooms": [{"beds": 2}, {"beds": 1, "crib": True}], "prefs": {"window": False, "note": None},
                   "budget": -1250.75, "tiny": 2.5e-7, "big": 12345678901, "empty": {}, "none": [],
                   "text": "line one\nline \"two\" with <tool_call|> and a \\ backslash"}),
    ("get_weather", {"city": "Oslo"}),
    ("book_trip", {}),
]
REASONING = "The user wants the weather.\nI will call the tools."
QUESTION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Plan a trip to Paris."}]


def tool_calls(calls, as_string):
    return [{"id": f"call_{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args) if as_string else args}}
            for i, (name, args) in enumerate(calls)]


def render(messages, add_generation_prompt=True, **kwargs):
    """The reference: jinja2 under transformers' settings on the published template."""
    source = {"kind": "template_file", "path": TEMPLATE_PATH, "bos_token": "<bos>", "eos_token": "<turn|>"}
    status, text = reference.reference(source, {"messages": messages, "add_generation_prompt": add_generation_prompt,
                                                **kwargs})
    assert status == "ok", text
    return text


def model_turn(calls, reasoning=None, content=""):
    """What the template writes for an assistant turn after the last user turn: the model's
    own text, as it would have generated it (the template leaves <|tool_response> open)."""
    turn = {"role": "assistant", "content": content, "tool_calls": tool_calls(calls, as_string=False)}
    if reasoning:
        turn["reasoning_content"] = reasoning
    text = render(QUESTION + [turn], add_generation_prompt=False, tools=TOOLS)
    text = text[text.rindex("<|turn>model\n") + len("<|turn>model\n"):]
    assert text.endswith("<|tool_response>"), text
    return text[:-len("<|tool_response>")]


def model_folder(tmp_path):
    """The tiny Nemotron-H as a chat model with Gemma 4's markers and chat template."""
    return character_chat_model(tmp_path / "gemma4_tiny", SPECIAL, EOS, "<bos>", "<turn|>", FIXTURES / TEMPLATE_PATH,
                                MAX_LEN)


def token_ids(text):
    """The ids of `text`: a marker is one token, any other character is its code."""
    ids, at = [], 0
    for m in SPECIAL_RE.finditer(text):
        ids += [ord(ch) for ch in text[at:m.start()]]
        ids.append(SPECIAL[m.group()])
        at = m.end()
    ids += [ord(ch) for ch in text[at:]]
    assert all(i in SPECIAL.values() or i == 10 or 32 <= i < 127 for i in ids), text
    return ids


def forced(text):
    """The answer's ids and the end of the turn."""
    return ",".join(str(i) for i in token_ids(text) + [EOS])


def serve(tmp_path, answer):
    return Server({"model.max_model_len": MAX_LEN, "engine.max_num_seqs": 2}, model=model_folder(tmp_path),
                  binary=SPARKD_TEST_HOOKS, env={"SPARKD_TEST_FORCED_TOKENS": forced(answer)}).wait_ready()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def answer(c, stream, **kwargs):
    """(reasoning, content, [(name, arguments as a value)], finish reason) of one request."""
    kw = dict(model="gemma4_tiny", max_tokens=1500, **kwargs)
    if stream:
        reasoning, content, calls, finish = assemble_chat_stream(c.chat.completions.create(stream=True, **kw))
    else:
        chat = c.chat.completions.create(**kw)
        m = chat.choices[0].message
        reasoning, content, finish = (m.model_extra or {}).get("reasoning_content"), m.content, chat.choices[0].finish_reason
        calls = [(t.function.name, t.function.arguments) for t in m.tool_calls or []]
    return reasoning or "", content or "", [(n, json.loads(a)) for n, a in calls], finish


@pytest.fixture(scope="module")
def round_trip_server(tmp_path_factory):
    s = serve(tmp_path_factory.mktemp("round_trip"), model_turn(CALLS, REASONING, "Booked it all."))
    yield s
    s.stop()


def test_what_the_template_writes_for_a_turn():
    """The shapes the parser inverts, as the published template prints them."""
    rendered = model_turn(CALLS, REASONING, "Booked it all.")
    assert rendered.startswith("<|channel>thought\n" + REASONING + "\n<channel|><|tool_call>call:get_weather{")
    assert "<|tool_call>call:book_trip{}<tool_call|>" in rendered
    assert "note:None" in rendered and "crib:true" in rendered and "tiny:2.5e-07" in rendered
    assert rendered.endswith("<tool_call|>Booked it all.")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_every_call_the_template_writes_reads_back(round_trip_server, stream):
    with client(round_trip_server) as c:
        reasoning, content, calls, finish = answer(c, stream, messages=QUESTION, tools=TOOLS)
    assert finish == "tool_calls"
    assert reasoning == REASONING
    assert content == "Booked it all."
    assert calls == CALLS


def test_turn_two_renders_as_jinja2_does(round_trip_server):
    """The assistant turn sent back as an OpenAI client sends it (arguments as JSON strings,
    reasoning_content beside) and the tool results: sparkd's prompt has the reference's
    length, thinking on and off."""
    turn = [{"role": "assistant", "content": None, "reasoning_content": REASONING,
             "tool_calls": tool_calls(CALLS[:2], as_string=True)},
            {"role": "tool", "tool_call_id": "call_0", "content": "{\"sky\": \"clear\"}"},
            {"role": "tool", "tool_call_id": "call_1", "content": "booked"}]
    as_objects = [dict(turn[0], tool_calls=tool_calls(CALLS[:2], as_string=False))] + turn[1:]
    with client(round_trip_server) as c:
        for kwargs in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
            for tail in ([], [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "And Rome?"}]):
                chat = c.chat.completions.create(model="gemma4_tiny", messages=QUESTION + turn + tail, tools=TOOLS,
                                                 max_tokens=1500, extra_body={"chat_template_kwargs": kwargs})
                expected = render(QUESTION + as_objects + tail, tools=TOOLS, **kwargs)
                assert "response:book_trip{value:<|\"|>booked<|\"|>}" in expected
                assert chat.usage.prompt_tokens == len(token_ids(expected)), (kwargs, expected)


def test_thinking_off_gives_content_and_calls_and_a_tool_response_ends_the_answer(tmp_path):
    call = model_turn(CALLS[:1])
    s = serve(tmp_path, "Checking the weather.\n" + call + "<|tool_response>response:get_weather{value:1}")
    try:
        with client(s) as c:
            for stream in (False, True):
                reasoning, content, calls, finish = answer(
                    c, stream, messages=QUESTION, tools=TOOLS, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
                assert not reasoning
                assert content == "Checking the weather.\n"
                assert calls == CALLS[:1] and finish == "tool_calls"
            chat = c.chat.completions.create(model="gemma4_tiny", messages=QUESTION, tools=TOOLS, max_tokens=1500,
                                             extra_body={"chat_template_kwargs": {"enable_thinking": False}})
            expected = render(QUESTION, tools=TOOLS, enable_thinking=False)
            assert expected.endswith("<|turn>model\n<|channel>thought\n<channel|>")
            assert chat.usage.prompt_tokens == len(token_ids(expected))
            # No tools offered: the call's text is content, markers and all.
            reasoning, content, calls, finish = answer(c, False, messages=QUESTION)
            assert not calls and content.startswith("Checking the weather.\n<|tool_call>call:get_weather{")
    finally:
        s.stop()


def validator_schema(schema):
    """The schema as jsonschema reads it: OpenAPI's nullable as a type that admits null."""
    if isinstance(schema, list):
        return [validator_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: validator_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


SCHEMA_OF = {t["function"]["name"]: validator_schema(t["function"]["parameters"]) for t in TOOLS}
FORCED_RUNS = 100


def why_invalid(choice, named=None):
    """None when the choice is one call of a declared (or the named) function whose arguments
    validate; else the reason."""
    calls = choice.message.tool_calls or []
    if len(calls) != 1:
        return f"{len(calls)} calls; content {choice.message.content!r}"
    name, arguments = calls[0].function.name, calls[0].function.arguments
    if named and name != named:
        return f"called {name}, not {named}"
    if name not in SCHEMA_OF:
        return f"called an undeclared {name!r}"
    try:
        jsonschema.validate(json.loads(arguments), SCHEMA_OF[name])
    except (ValueError, jsonschema.ValidationError) as e:
        return f"{type(e).__name__}: {str(e)[:200]} in {arguments[:300]!r}"
    return None


@pytest.fixture(scope="module")
def free_server(tmp_path_factory):
    """The random model, nothing forced: what it writes is what the constraint allows."""
    s = Server({"model.max_model_len": MAX_LEN, "engine.max_num_seqs": 10},
               model=model_folder(tmp_path_factory.mktemp("free"))).wait_ready()
    yield s
    s.stop()


@pytest.mark.parametrize("tool_choice", ["required", "book_trip"])
def test_forced_calls_follow_the_schema(free_server, tool_choice):
    """Thinking off (a thinking model's forced call is not opened in the prompt): by Gemma 4's
    template's default for "required", said by the request for the named call."""
    named = None if tool_choice == "required" else tool_choice
    kwargs = {"chat_template_kwargs": {"enable_thinking": False}} if named else {}
    choice_param = "required" if not named else {"type": "function", "function": {"name": named}}
    with client(free_server) as c:
        def one(seed):
            return c.chat.completions.create(
                model="gemma4_tiny", messages=QUESTION, tools=TOOLS, tool_choice=choice_param, temperature=1.0,
                max_tokens=160, n=10, seed=seed, extra_body=kwargs).choices

        runs = FORCED_RUNS // 2
        with ThreadPoolExecutor(2) as pool:
            choices = [ch for batch in pool.map(one, range(runs // 10)) for ch in batch]
    assert len(choices) == runs
    failures = [(ch.index, why) for ch in choices if (why := why_invalid(ch, named))]
    assert not failures, failures[:5]
    assert all(ch.finish_reason in ("tool_calls", "length") for ch in choices)
    names = {ch.message.tool_calls[0].function.name for ch in choices}
    print(f"{tool_choice}: {len(choices)} calls validate, to {sorted(names)}")
    if named:
        assert names == {named}
    # Strings the random model wrote hold the notation's own punctuation and stay whole.
    texts = [json.loads(ch.message.tool_calls[0].function.arguments) for ch in choices]
    assert any(any(p in json.dumps(t) for p in (",", ":", "{", "}")) for t in texts)


def test_auto_calls_the_model_opens_follow_the_schema(free_server):
    """tool_choice "auto": the random model opens a call now and then (<|tool_call> is one of
    its tokens); every call it opens is held to the grammar and reads back valid."""
    with client(free_server) as c:
        def one(seed):
            return c.chat.completions.create(
                model="gemma4_tiny", messages=QUESTION, tools=TOOLS, temperature=1.0, max_tokens=200, n=10, seed=seed,
                extra_body={"chat_template_kwargs": {"enable_thinking": False}}).choices

        with ThreadPoolExecutor(2) as pool:
            choices = [ch for batch in pool.map(one, range(3)) for ch in batch]
    calls, failures = 0, []
    for ch in choices:
        if "<|tool_call>" in (ch.message.content or "") and ch.finish_reason != "length":
            failures.append(("an opened call was not parsed", ch.message.content))
        for call in ch.message.tool_calls or []:
            calls += 1
            try:
                jsonschema.validate(json.loads(call.function.arguments), SCHEMA_OF[call.function.name])
            except (KeyError, ValueError, jsonschema.ValidationError) as e:
                failures.append((call.function.name, repr(e)[:300]))
    print(f"auto: {calls} calls in {len(choices)} answers")
    assert calls, "the seeded random model opens a call in some answers"
    assert not failures, failures[:5]
