"""Tool-call conversations in every shape clients send them, through the server's own path.

Agent frameworks send the assistant's tool-call message with content null (OpenAI Agents
SDK), missing (most), "" or as a list of text parts, and tool results as strings or parts.
The server normalises messages before the template sees them, as vLLM does (its
chat_utils: null or missing content is "", text parts are joined with newlines, tool-call
arguments are parsed from their JSON text). Each fixture model's template is rendered here
through POST /tokenize (the chat completions prompt path) and compared with the reference:
the same normalisation written out below, transformers' apply_chat_template and HF
`tokenizers`. Where the template itself refuses a conversation (Gemma 3 has no tool role),
both must refuse it with the same message. The requests offer no tools (the history holds
the calls): a template that does not print tools gets the server's own tool note, which is
not what this test is about.
"""
import copy
import json
import shutil
import sys

import pytest
import requests
from tokenizers import Tokenizer

from conftest import FIXTURES, REPO, Server

sys.path.insert(0, str(REPO / "tests" / "gen"))
import gen_template_golden as gen  # noqa: E402

CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def assistant_call(shape):
    m = {"role": "assistant", "tool_calls": [CALL]}
    if shape == "null":
        m["content"] = None
    elif shape == "empty":
        m["content"] = ""
    elif shape == "parts":
        m["content"] = [{"type": "text", "text": "Let me look."}]
    elif shape == "text":
        m["content"] = "Let me look."
    return m  # "missing": no content key


def tool_result(shape):
    if shape == "parts":
        return {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sunny"},
                                                                       {"type": "text", "text": "20 C"}]}
    return {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 20 C"}


SHAPES = [(a, t) for a in ("missing", "null", "empty", "parts", "text") for t in ("string", "parts")]


def conversation(assistant_shape, tool_shape):
    return [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris?"},
            assistant_call(assistant_shape), tool_result(tool_shape)]


def normalised(messages):
    """vLLM's normalisation, written out independently of the server's."""
    out = []
    for m in copy.deepcopy(messages):
        content = m.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list):
            m["content"] = "\n".join(p["text"] for p in content if p.get("text") is not None)
        for c in m.get("tool_calls") or []:
            try:
                c["function"]["arguments"] = json.loads(c["function"]["arguments"])
            except (TypeError, ValueError):
                c["function"]["arguments"] = {}
        out.append(m)
    return out


FIXTURE_MODELS = ["qwen3", "llama3_1", "gptoss", "gemma3"]


# SmolLM2's template (the default model's) takes these shapes in the real-client suite.
@pytest.fixture(scope="module", params=FIXTURE_MODELS)
def served(request, tmp_path_factory):
    name = request.param
    src = FIXTURES / "tokenizers" / name
    d = tmp_path_factory.mktemp(name)
    for f in src.iterdir():
        if f.name != "PACKAGE_LICENSE" and not f.name.endswith(".xz"):
            shutil.copy(f, d / f.name)
    vocab = Tokenizer.from_file(str(src / "tokenizer.json")).get_vocab_size(with_added_tokens=True)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
        "vocab_size": vocab, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": True, "torch_dtype": "float32", "hidden_act": "silu"}))
    with Server(model=d, settings={"model.load_format": "dummy", "model.max_model_len": 4096,
                                   "engine.max_num_seqs": 2}) as s:
        yield name, d, s.wait_ready()


def reference(name, folder, messages):
    """(ids, None) or (None, the error text) from transformers + HF tokenizers."""
    request = {"messages": normalised(messages), "add_generation_prompt": True}
    try:
        text = gen.render_with_tokenizer(str(folder), request)
    except Exception as e:  # the template's own refusal (raise_exception)
        return None, str(e)
    return text, None


@pytest.mark.parametrize("assistant_shape,tool_shape", SHAPES, ids=[f"{a}-{t}" for a, t in SHAPES])
def test_shape_renders_as_the_reference(served, assistant_shape, tool_shape):
    name, folder, server = served
    messages = conversation(assistant_shape, tool_shape)
    r = requests.post(server.url + "/tokenize", json={"messages": messages}, timeout=60)
    text, error = reference(name, folder, messages)
    if error is not None:
        assert r.status_code == 400, r.text[:300]
        assert error in r.json()["error"]["message"]
        return
    assert r.status_code == 200, r.text[:300]
    assert r.json()["tokens"] == encode(name, folder, text)


_encoders = {}


def encode(name, folder, text):
    """HF `tokenizers` on the model's tokenizer.json."""
    if name not in _encoders:
        _encoders[name] = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return _encoders[name].encode(text, add_special_tokens=False).ids
