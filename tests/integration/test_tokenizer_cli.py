"""test_tokenizer_cli.py — `sparkd tokenize` / `sparkd detokenize` as scripts use them: JSONL in
and out, defaults as Hugging Face's encode/decode, exit 2 with the line named on bad input."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gen"))
import tokenizer_reference as ref  # noqa: E402

SPARKD = os.environ.get("SPARKD_BIN", str(REPO / "build" / "sparkd"))
SMOL = ref.model_path("smollm2")


def sparkd(*args, stdin=b""):
    return subprocess.run([SPARKD, *args], input=stdin, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def smol_ref():
    assert SMOL.exists(), f"{SMOL} missing (run `make model`)"
    return ref.smollm2_reference()


def test_tokenize_defaults_and_options(smol_ref):
    lines = [{"text": "<|im_start|>user\nHi 123<|im_end|>"},
             {"text": "<|im_start|>x", "add_special_tokens": False},
             {"text": "<|im_start|>x", "parse_special": False}]
    p = sparkd("tokenize", "--model", str(SMOL), stdin="".join(json.dumps(l) + "\n" for l in lines).encode())
    assert p.returncode == 0, p.stderr
    out = [json.loads(l) for l in p.stdout.decode().splitlines()]
    assert out[0]["ids"] == smol_ref.encode(lines[0]["text"]).ids
    assert out[1]["ids"] == smol_ref.encode(lines[1]["text"], add_special_tokens=False).ids
    assert out[2]["ids"] == ref.encode_literal(smol_ref, [lines[2]["text"]])[0]
    assert out[2]["ids"] != out[1]["ids"]


def test_detokenize_defaults_and_invalid_utf8(smol_ref):
    ids = smol_ref.encode("<|im_start|>héllo 🙂").ids
    # A lone byte-level token for 0xF0 is an incomplete sequence: U+FFFD, as the reference.
    lone = smol_ref.token_to_id("ð")
    lines = [{"ids": ids}, {"ids": ids, "skip_special_tokens": True}, {"ids": [lone, lone]}]
    p = sparkd("detokenize", "--model", str(SMOL), stdin="".join(json.dumps(l) + "\n" for l in lines).encode())
    assert p.returncode == 0, p.stderr
    out = [json.loads(l)["text"] for l in p.stdout.decode().split("\n")[:-1]]
    assert out[0] == smol_ref.decode(ids, skip_special_tokens=False) == "<|im_start|>héllo 🙂"
    assert out[1] == smol_ref.decode(ids, skip_special_tokens=True) == "héllo 🙂"
    assert out[2] == smol_ref.decode([lone, lone], skip_special_tokens=False) == "\ufffd\ufffd"


@pytest.mark.parametrize("command,stdin,needle", [
    ("tokenize", b'{"text": "ok"}\n{"text": \n', "line 2"),
    ("tokenize", b'{"text": "ok"}\n{"text": 5}\n', "line 2"),
    ("tokenize", b'{"text": "ok", "add_special_tokens": "yes"}\n', "line 1"),
    ("tokenize", b'[1, 2]\n', "line 1"),
    ("detokenize", b'{"ids": [1, 2]}\n{"ids": [1, -5]}\n', "line 2"),
    ("detokenize", b'{"ids": "1 2"}\n', "line 1"),
])
def test_bad_input_exits_2_naming_the_line(command, stdin, needle):
    p = sparkd(command, "--model", str(SMOL), stdin=stdin)
    assert p.returncode == 2
    assert needle in p.stderr.decode()


def test_bad_model_paths_exit_2(tmp_path):
    assert sparkd("tokenize").returncode == 2
    p = sparkd("tokenize", "--model", str(tmp_path / "nope"), stdin=b'{"text": "x"}\n')
    assert p.returncode == 2 and "does not exist" in p.stderr.decode()
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}')
    p = sparkd("tokenize", "--model", str(tmp_path), stdin=b'{"text": "x"}\n')
    assert p.returncode == 2 and "not in the vocabulary" in p.stderr.decode()


def test_catastrophic_regex_is_a_clean_error(tmp_path):
    tok = {"model": {"type": "BPE", "vocab": {"x": 0, "!": 1}, "merges": []},
           "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(x+x+)+$"}, "behavior": "Isolated", "invert": False}}
    (tmp_path / "tokenizer.json").write_text(json.dumps(tok))
    p = sparkd("tokenize", "--model", str(tmp_path), stdin=json.dumps({"text": "x" * 5000 + "!"}).encode() + b"\n")
    assert p.returncode == 2
    assert "line 1" in p.stderr.decode() and "match limit" in p.stderr.decode()
