"""The tiny gpt-oss model (tests/golden/models/gpt_oss) served by `sparkd serve` and read
through the official openai SDK: harmony output split into reasoning_content, content and
tool_calls, streaming and not, the same message both ways; reasoning_effort reaching the
chat template; output that is not harmony returned as content.

A random tiny model writes no harmony of its own, so the answers are steered by a regular
expression (guided_regex): the constraint fixes the text, the gpt-oss forward pass picks
the tokens. The test tokenizer holds each harmony marker as an ordinary token beside single
characters, and the chat template writes harmony's header ("<|start|>assistant").
"""
import json
import re
import shutil

import openai
import pytest

from conftest import REPO, Server, assemble_chat_stream

MODEL = REPO / "tests" / "golden" / "models" / "gpt_oss"
MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"]
EOS = 2
TEMPLATE = ("{#- a harmony-shaped template: <|channel|> headers, <|message|> bodies -#}"
            "<|start|>system<|message|>{{ reasoning_effort | default('medium') }}<|end|>"
            "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
            "{%- if tools %}<|start|>developer<|message|>{{ tools | length }} tool<|end|>{% endif %}"
            "{%- if add_generation_prompt %}<|start|>assistant{% endif %}")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def tokenizer():
    # Ids 0 and 1 unused characters, 2 the EOS the model's generation_config names, then the
    # markers, printable ASCII, and more unused characters up to the model's 256.
    pieces = [chr(0x4E00), chr(0x4E01), "<eos>"] + MARKERS + [chr(c) for c in range(32, 127)]
    pieces += [chr(0x4E02 + i) for i in range(256 - len(pieces))]
    vocab = {p: i for i, p in enumerate(pieces)}
    assert vocab["<eos>"] == EOS and len(vocab) == 256
    return {"version": "1.0", "truncation": None, "padding": None, "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": {"type": "Fuse"},
            # The markers are added tokens, so a prompt spends one token on each; the answer may
            # spell them either way (the constraint matches text).
            "added_tokens": [{"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                              "normalized": False, "special": t == "<eos>"} for t in ["<eos>"] + MARKERS],
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": []}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("gptoss") / "gpt_oss"
    shutil.copytree(MODEL, d)
    (d / "tokenizer.json").write_text(json.dumps(tokenizer()))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>", "chat_template": TEMPLATE}))
    with Server(model=d, settings={"model.max_model_len": 256, "engine.max_num_seqs": 4}) as s:
        yield s.wait_ready()


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def regex_for(text):
    return re.escape(text).replace("\\ ", " ")


def ask(server, answer, stream, **kw):
    """The chat answer, non-streamed or assembled from the stream as a client would."""
    c = client(server)
    args = dict(model=c.models.list().data[0].id, messages=[{"role": "user", "content": "Paris?"}],
                max_tokens=len(answer) + 1, temperature=0, extra_body={"guided_regex": regex_for(answer)}, **kw)
    if not stream:
        r = c.chat.completions.create(**args)
        m = r.choices[0].message
        calls = [(t.function.name, t.function.arguments) for t in (m.tool_calls or [])]
        return (m.model_extra or {}).get("reasoning_content") or "", m.content or "", calls, r.choices[0].finish_reason
    return assemble_chat_stream(c.chat.completions.create(stream=True, **args))


ANSWER = "<|channel|>analysis<|message|>User asks weather.<|end|><|start|>assistant<|channel|>final<|message|>Sunny in Paris.<|return|>"
CALL = ('<|channel|>analysis<|message|>Need a tool.<|end|><|start|>assistant<|channel|>commentary '
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>')


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_and_content(server, stream):
    reasoning, content, calls, finish = ask(server, ANSWER, stream)
    assert (reasoning, content, calls) == ("User asks weather.", "Sunny in Paris.", [])
    assert finish == "stop"


@pytest.mark.parametrize("stream", [False, True])
def test_tool_call(server, stream):
    reasoning, content, calls, finish = ask(server, CALL, stream, tools=TOOLS)
    assert reasoning == "Need a tool."
    assert content == ""
    assert calls == [("get_weather", '{"city": "Paris"}')]
    assert finish == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_output_that_is_not_harmony_is_content(server, stream):
    reasoning, content, calls, _ = ask(server, "plain words, no header", stream)
    assert (reasoning, content, calls) == ("", "plain words, no header", [])


def test_reasoning_effort_reaches_the_template(server):
    c = client(server)
    model = c.models.list().data[0].id
    used = {}
    for effort in ("low", "high"):
        r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=1,
                                      reasoning_effort=effort)
        used[effort] = r.usage.prompt_tokens
    assert used["high"] - used["low"] == len("high") - len("low")  # one token per character
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=1,
                                  extra_body={"reasoning_effort": "extreme"})
