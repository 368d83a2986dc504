"""test_tokenizer_synthetic.py — sparkd vs Hugging Face `tokenizers` on small tokenizers trained
on the spot (tests/gen/tokenizer_synthetic.py), covering pipeline shapes beyond the fixtures:
same tokenizer.json for both, the whole oracle corpus, ids and decodes must be identical.
"""
import gzip
import json
import os
import pathlib
import random
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gen"))
import tokenizer_synthetic  # noqa: E402

SPARKD = os.environ.get("SPARKD_BIN", str(REPO / "build" / "sparkd"))
with gzip.open(REPO / "tests" / "golden" / "tokenizer" / "corpus.json.gz", "rt", encoding="utf-8") as _f:
    RAW = [s.encode("utf-8", "surrogateescape") for s in json.load(_f)]
TEXTS = [b.decode("utf-8", "replace") for b in RAW]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic_tokenizers")
    out = {}
    for name, text in tokenizer_synthetic.build(TEXTS).items():
        d = root / name
        d.mkdir()
        (d / "tokenizer.json").write_text(text, encoding="utf-8")
        out[name] = d
    return out


NAMES = ["sp_metaspace_first", "sp_metaspace_always_nosplit", "sp_legacy_llama2", "bytelevel_prefix_roberta",
         "bert_like_prefix", "nfkc_lower_suffix", "split_behaviors", "split_invert_delims", "added_token_options",
         "ignore_merges_llama3_style", "digits_metaspace_custom"]


def run_jsonl(command, model, lines):
    proc = subprocess.run([SPARKD, command, "--model", str(model)], input=b"".join(l + b"\n" for l in lines),
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    out = proc.stdout.split(b"\n")[:-1]
    assert len(out) == len(lines)
    return [json.loads(o) for o in out]


def text_line(raw, extra):
    text = json.dumps(raw.decode("utf-8", "surrogateescape"), ensure_ascii=False)
    head = json.dumps(extra)[:-1]
    return (head + (", " if extra else "") + '"text": ' + text + "}").encode("utf-8", "surrogateescape")


def mismatches(got, want, labels):
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    return f"{len(want) - len(bad)}/{len(want)} identical" + "".join(
        f"\n  {labels[i]!r:.80}: got {got[i]!r:.160} want {want[i]!r:.160}" for i in bad[:5]), bad


@pytest.mark.parametrize("name", NAMES)
def test_synthetic_tokenizer_matches_reference(built, name):
    from tokenizers import Tokenizer
    path = built[name]
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    lines = [text_line(b, {}) for b in RAW] + [text_line(b, {"add_special_tokens": False}) for b in RAW]
    out = [o["ids"] for o in run_jsonl("tokenize", path, lines)]
    want = [e.ids for e in tok.encode_batch(TEXTS)] + [e.ids for e in tok.encode_batch(TEXTS, add_special_tokens=False)]
    msg, bad = mismatches(out, want, TEXTS + TEXTS)
    assert not bad, f"{name} ids: {msg}"
    rng = random.Random(7)
    size = tok.get_vocab_size(with_added_tokens=True)
    rand = [[rng.randrange(size + 3) for _ in range(rng.randint(1, 20))] for _ in range(300)]
    seqs = want[:len(TEXTS)] + rand
    dl = [json.dumps({"ids": s, "skip_special_tokens": k}).encode() for s in seqs for k in (False, True)]
    got = [o["text"] for o in run_jsonl("detokenize", path, dl)]
    exp = [tok.decode(s, skip_special_tokens=k) for s in seqs for k in (False, True)]
    msg, bad = mismatches(got, exp, [str(s) for s in seqs for _ in (0, 1)])
    assert not bad, f"{name} decode: {msg}"
