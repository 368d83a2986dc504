"""What keeps working on a hybrid model (the tiny Qwen3.5-MoE and Qwen3-Next, CPU backend):
structured outputs, whose constrained tokens must follow the schema while the DeltaNet
states advance; tool calls forced in Qwen3-Coder's XML format (Qwen3.5's), whose bare
parameter values must read back as arguments that follow each function's schema; and streams
cut off by their clients, whose state slots must come back (more sequences than slots run
afterwards). The tokenizer spells printable ASCII as itself
and joins tokens without spaces (a Fuse decoder), so JSON can be written.
"""
import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest
import requests

from conftest import REPO, Server
from test_serve_tiny_models import BASE, eos_id


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "c": {"enum": ["x", "y"]}, "ok": {"type": "boolean"}},
          "required": ["n", "c", "ok"], "additionalProperties": False}


def ascii_copy(name, tmp_path, chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}"):
    """The model with a one-character-a-token tokenizer: ids 32..126 and 10 are those ASCII
    characters, the others CJK characters; the EOS id a special token."""
    d = tmp_path / name
    shutil.copytree(REPO / "tests" / "golden" / "models" / name, d)
    eos = eos_id(name)
    vocab = {(chr(i) if 32 <= i <= 126 or i == 10 else chr(BASE + i)): i for i in range(256)}
    eos_text = next(t for t, i in vocab.items() if i == eos)
    (d / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "pre_tokenizer": None,
        "post_processor": None, "decoder": {"type": "Fuse"},  # tokens joined as they are, no spaces
        "added_tokens": [{"id": eos, "content": eos_text, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": eos_text, "chat_template": chat_template}))
    return d


@pytest.mark.parametrize("name", ["qwen3_5_moe", "qwen3_next"])
def test_structured_outputs_and_cut_streams_on_a_hybrid(name, tmp_path):
    s = Server({"model.max_model_len": 256, "engine.max_num_seqs": 3}, model=ascii_copy(name, tmp_path)).wait_ready()
    try:
        for prompt in ("hello", "a much longer prompt, written to cross a few DeltaNet chunks" * 2):
            r = requests.post(s.url + "/v1/chat/completions", timeout=120, json={
                "messages": [{"role": "user", "content": prompt}], "max_tokens": 64, "temperature": 0,
                "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}})
            assert r.status_code == 200, r.text
            jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), SCHEMA)
        # Six streams cut after their first chunk, on three state slots; then six whole requests.
        for _ in range(6):
            with requests.post(s.url + "/v1/completions", stream=True, timeout=60, json={
                    "prompt": "cut me off", "max_tokens": 200, "stream": True, "ignore_eos": True}) as cut:
                assert cut.status_code == 200
                next(cut.iter_lines())
        for _ in range(6):
            r = requests.post(s.url + "/v1/completions", timeout=120, json={
                "prompt": "and now", "max_tokens": 8, "temperature": 0, "ignore_eos": True})
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8, r.text
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
    finally:
        s.stop()


# A template that writes its tools the Qwen3-Coder way (so the qwen3_xml format is detected).
XML_TEMPLATE = ("{% if tools %}Functions:{% for t in tools %} {{ t.function.name }}{% endfor %}. Call one as "
                "<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>\n"
                "{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}")
XML_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "required": ["city", "unit"], "properties": {
            "city": {"type": "string", "maxLength": 12},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}},
    {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "required": ["when", "code", "seats", "vip", "note", "meta"], "properties": {
            "when": {"type": "string", "format": "date"},
            "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2}$"},
            "seats": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3},
            "vip": {"type": "boolean"},
            "note": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]},
            "price": {"type": "number"},
            "meta": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}, "required": ["k"],
                     "additionalProperties": False}}}}},
]


def check_call(name, arguments, named=None):
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in XML_TOOLS}
    assert name in schemas and (named is None or name == named), name
    jsonschema.validate(json.loads(arguments), schemas[name], format_checker=jsonschema.FormatChecker())


def test_forced_qwen3_xml_calls_follow_each_functions_schema(tmp_path):
    model = ascii_copy("qwen3_5_moe", tmp_path, XML_TEMPLATE)
    config = json.loads((model / "config.json").read_text())
    config["text_config"]["max_position_embeddings"] = 1024  # room for a call of a character a token
    (model / "config.json").write_text(json.dumps(config))
    s = Server({"model.max_model_len": 1024, "engine.max_num_seqs": 8}, model=model).wait_ready()
    try:
        def forced(i):
            named = XML_TOOLS[i % 2]["function"]["name"] if i % 3 == 0 else None
            choice = {"type": "function", "function": {"name": named}} if named else "required"
            r = requests.post(s.url + "/v1/chat/completions", timeout=300, json={
                "messages": [{"role": "user", "content": f"request {i}"}], "tools": XML_TOOLS, "tool_choice": choice,
                "max_tokens": 400, "temperature": 1.0, "seed": i})
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert choice["finish_reason"] == "tool_calls", choice
            calls = choice["message"]["tool_calls"]
            assert len(calls) == 1, calls
            check_call(calls[0]["function"]["name"], calls[0]["function"]["arguments"], named)
            return calls[0]["function"]["name"]

        with ThreadPoolExecutor(8) as pool:
            names = list(pool.map(forced, range(100)))
        assert set(names) == {"get_weather", "book"}
        # Streamed as OpenAI streams calls: the name first, the arguments in pieces.
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="none")
        stream = client.chat.completions.create(model="qwen3_5_moe", messages=[{"role": "user", "content": "stream it"}],
                                                tools=XML_TOOLS, tool_choice="required", max_tokens=400, stream=True,
                                                temperature=1.0, seed=7)
        name, arguments = None, ""
        for chunk in stream:
            for d in chunk.choices[0].delta.tool_calls or []:
                name = name or d.function.name
                arguments += d.function.arguments or ""
        check_call(name, arguments)
    finally:
        s.stop()
