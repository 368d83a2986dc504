"""What keeps working on a hybrid model (the tiny Qwen3.5-MoE and Qwen3-Next, CPU backend):
structured outputs, whose constrained tokens must follow the schema while the DeltaNet
states advance, and streams cut off by their clients, whose state slots must come back
(more sequences than slots run afterwards). The tokenizer spells printable ASCII as itself
and joins tokens without spaces (a Fuse decoder), so JSON can be written.
"""
import json
import shutil

import jsonschema
import pytest
import requests

from conftest import EMULATED_GPU, REPO, Server
from test_serve_tiny_models import BASE, HYBRID_CPU_ONLY, eos_id

pytestmark = pytest.mark.skipif(EMULATED_GPU, reason=HYBRID_CPU_ONLY)

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "c": {"enum": ["x", "y"]}, "ok": {"type": "boolean"}},
          "required": ["n", "c", "ok"], "additionalProperties": False}


def ascii_copy(name, tmp_path):
    """The model with a one-character-a-token tokenizer: ids 32..126 are those ASCII
    characters, the others CJK characters; the EOS id a special token."""
    d = tmp_path / name
    shutil.copytree(REPO / "tests" / "golden" / "models" / name, d)
    eos = eos_id(name)
    vocab = {(chr(i) if 32 <= i <= 126 else chr(BASE + i)): i for i in range(256)}
    eos_text = next(t for t, i in vocab.items() if i == eos)
    (d / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "pre_tokenizer": None,
        "post_processor": None, "decoder": {"type": "Fuse"},  # tokens joined as they are, no spaces
        "added_tokens": [{"id": eos, "content": eos_text, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}],
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": eos_text, "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}))
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
