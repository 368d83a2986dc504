"""Harmony output with gpt-oss's real tokenizer, on every chat route.

In gpt-oss's tokenizer.json the harmony markers (<|channel|>, <|message|>, <|start|>,
<|end|>, ...) are special tokens, and <|return|> and <|call|> end generation. A server
that decodes with skip_special_tokens (the API default) strips the markers the harmony
parser reads, so the answer must keep them on every route that parses it. The tokens are
forced through the test build's hook (SPARKD_TEST_FORCED_TOKENS, engine/util/test_hooks.h):
the ids are the real tokenizer's encoding of a harmony answer (HF `tokenizers`), so the
special tokens reach the detokenizer as the model would emit them. Chat completions,
Responses and Messages, each whole and streamed, must give the same reasoning, content and
tool calls.
"""
import json
import shutil

import anthropic
import openai
import pytest
import requests
from tokenizers import Tokenizer

from conftest import FIXTURES, REPO, SPARKD_TEST_HOOKS, Server, assemble_chat_stream

GPTOSS = FIXTURES / "tokenizers" / "gptoss"
TINY = REPO / "tests" / "golden" / "models" / "gpt_oss"
VOCAB = 201088  # gpt-oss's embedding rows
STOP_IDS = [200002, 199999, 200012]  # <|return|>, <|endoftext|>, <|call|> as gpt-oss's generation_config
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
ANSWER = ("<|channel|>analysis<|message|>User asks about Paris.<|end|>"
          "<|start|>assistant<|channel|>final<|message|>Sunny in Paris.<|return|>")
CALL = ("<|channel|>analysis<|message|>Need the weather tool.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris"}<|call|>')
EXPECTED = {"answer": ("User asks about Paris.", "Sunny in Paris.", []),
            "call": ("Need the weather tool.", "", [("get_weather", {"city": "Paris"})])}


def forced_ids(text):
    ids = Tokenizer.from_file(str(GPTOSS / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    # The markers must be single special tokens, as the model writes them, else the test
    # would not be testing what it says.
    assert 200005 in ids and 200008 in ids and ids[-1] in STOP_IDS
    return ids


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("gptoss-real-tokenizer")
    config = json.loads((TINY / "config.json").read_text())
    config.update(vocab_size=VOCAB, max_position_embeddings=4096, eos_token_id=STOP_IDS, pad_token_id=199999)
    (d / "config.json").write_text(json.dumps(config))
    (d / "generation_config.json").write_text(json.dumps({"bos_token_id": 199998, "eos_token_id": STOP_IDS}))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(GPTOSS / name, d / name)
    return d


@pytest.fixture(scope="module", params=["answer", "call"])
def served(request, model_dir):
    text = ANSWER if request.param == "answer" else CALL
    env = {"SPARKD_TEST_FORCED_TOKENS": ",".join(map(str, forced_ids(text)))}
    settings = {"model.load_format": "dummy", "model.max_model_len": 2048, "engine.max_num_seqs": 2,
                "engine.speculative": "none"}
    with Server(model=model_dir, settings=settings, env=env, binary=SPARKD_TEST_HOOKS) as s:
        yield request.param, s.wait_ready()


def chat(server, stream):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    args = dict(model=c.models.list().data[0].id, messages=[{"role": "user", "content": "Weather in Paris?"}],
                tools=TOOLS, max_tokens=64)
    if not stream:
        m = c.chat.completions.create(**args).choices[0].message
        calls = [(t.function.name, json.loads(t.function.arguments)) for t in m.tool_calls or []]
        return (m.model_extra or {}).get("reasoning_content") or "", m.content or "", calls
    reasoning, content, calls, _ = assemble_chat_stream(c.chat.completions.create(stream=True, **args))
    return reasoning, content, [(n, json.loads(a)) for n, a in calls]


def responses(server, stream):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    args = dict(model=c.models.list().data[0].id, input="Weather in Paris?", tools=tools, max_output_tokens=64)
    if stream:
        with c.responses.stream(**args) as s:
            r = s.get_final_response()
    else:
        r = c.responses.create(**args)
    reasoning = "".join(p.text for o in r.output if o.type == "reasoning" for p in o.content or [])
    content = "".join(p.text for o in r.output if o.type == "message" for p in o.content)
    calls = [(o.name, json.loads(o.arguments)) for o in r.output if o.type == "function_call"]
    return reasoning, content, calls


def messages(server, stream):
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    model = openai.OpenAI(base_url=server.url + "/v1", api_key="unused").models.list().data[0].id
    args = dict(model=model, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools, max_tokens=64,
                thinking={"type": "enabled", "budget_tokens": 1024})
    if stream:
        with c.messages.stream(**args) as s:
            r = s.get_final_message()
    else:
        r = c.messages.create(**args)
    reasoning = "".join(b.thinking for b in r.content if b.type == "thinking")
    content = "".join(b.text for b in r.content if b.type == "text")
    calls = [(b.name, b.input) for b in r.content if b.type == "tool_use"]
    return reasoning, content, calls


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("route", [chat, responses, messages], ids=["chat", "responses", "messages"])
def test_harmony_split_on_every_route(served, route, stream):
    kind, server = served
    assert route(server, stream) == EXPECTED[kind]


def test_skip_special_tokens_false_keeps_the_markers_on_completions(served):
    """The plain completions route parses nothing: the client's skip_special_tokens decides."""
    kind, server = served
    body = {"prompt": "<|start|>user<|message|>x<|end|><|start|>assistant", "max_tokens": 64}
    kept = requests.post(server.url + "/v1/completions", json={**body, "skip_special_tokens": False}, timeout=120)
    skipped = requests.post(server.url + "/v1/completions", json=body, timeout=120)
    text = (ANSWER if kind == "answer" else CALL).rsplit("<|", 1)[0]  # the stop token is not text
    assert kept.json()["choices"][0]["text"] == text
    assert "<|channel|>" not in skipped.json()["choices"][0]["text"]
