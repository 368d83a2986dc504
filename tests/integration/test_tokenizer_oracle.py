"""test_tokenizer_oracle.py — sparkd tokenize/detokenize against Hugging Face `tokenizers`.

For each fixture tokenizer (tokenizer_reference.FIXTURE_NAMES) and the SmolLM2 GGUF tokenizer,
the whole corpus (tests/golden/tokenizer/corpus.json.gz, built by tests/gen/tokenizer_corpus.py)
goes through one `sparkd tokenize` and one `sparkd detokenize` process. The results are
compared with the golden files (written by tests/gen/gen_tokenizer_golden.py from the
reference) and with the reference run live in this process.
"""
import gzip
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "gen"))
import tokenizer_reference as ref  # noqa: E402

GOLDEN = REPO / "tests" / "golden" / "tokenizer"
SPARKD = os.environ.get("SPARKD_BIN", str(REPO / "build" / "sparkd"))


def load_gz(path):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def run_jsonl(command, model, lines):
    """Runs one sparkd process over all lines (bytes); returns the parsed output lines."""
    proc = subprocess.run([SPARKD, command, "--model", str(model)], input=b"".join(l + b"\n" for l in lines),
                          capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")
    out = proc.stdout.split(b"\n")
    assert out[-1] == b""
    out = out[:-1]
    assert len(out) == len(lines)
    return [json.loads(o.decode("utf-8")) for o in out]


def request_line(obj, text_raw=None):
    """A JSONL request; text_raw (bytes) is embedded as-is so ill-formed UTF-8 reaches sparkd."""
    if text_raw is None:
        return json.dumps(obj).encode()
    text = json.dumps(text_raw.decode("utf-8", "surrogateescape"), ensure_ascii=False)
    obj = dict(obj)
    head = json.dumps(obj)[:-1]
    sep = ", " if obj else ""
    return (head + sep + '"text": ' + text + "}").encode("utf-8", "surrogateescape")


@pytest.fixture(scope="module")
def corpus():
    raw = [s.encode("utf-8", "surrogateescape") for s in load_gz(GOLDEN / "corpus.json.gz")]
    return raw, [b.decode("utf-8", "replace") for b in raw]


_cache = {}


@pytest.fixture(scope="module", params=ref.ALL_NAMES)
def run(request, corpus):
    """sparkd's outputs, the golden data and the live reference for one tokenizer."""
    name = request.param
    if name in _cache:
        return _cache[name]
    if not ref.available(name):
        pytest.fail(f"tokenizer files for {name} not found at {ref.model_path(name)} (run `make model`?)")
    raw, texts = corpus
    model = ref.model_path(name)
    golden = load_gz(GOLDEN / f"{name}.json.gz")
    lines = []
    for b in raw:
        lines.append(request_line({}, b))
        lines.append(request_line({"add_special_tokens": False}, b))
        lines.append(request_line({"parse_special": False}, b))
    out = run_jsonl("tokenize", model, lines)
    ids = [o["ids"] for o in out[0::3]]
    plain = [o["ids"] for o in out[1::3]]
    literal = [o["ids"] for o in out[2::3]]
    rand = [c["ids"] for c in golden["random_ids"]]
    dlines = [json.dumps({"ids": s, "skip_special_tokens": skip}).encode() for s in ids + rand for skip in (False, True)]
    dout = [o["text"] for o in run_jsonl("detokenize", model, dlines)]
    res = {"name": name, "texts": texts, "golden": golden, "ids": ids, "plain": plain, "literal": literal,
           "decoded": dout[0:2 * len(ids):2], "decoded_skip": dout[1:2 * len(ids):2],
           "rand_decoded": dout[2 * len(ids)::2], "rand_decoded_skip": dout[2 * len(ids) + 1::2],
           "ref": ref.reference(name)}
    _cache.clear()  # one tokenizer in memory at a time
    _cache[name] = res
    return res


def report(name, what, got, want, texts=None):
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    detail = "".join(f"\n  #{i} {texts[i]!r:.80}: got {got[i]!r:.200} want {want[i]!r:.200}" if texts else
                     f"\n  #{i}: got {got[i]!r:.200} want {want[i]!r:.200}" for i in bad[:5])
    assert not bad, f"{name} {what}: {len(want) - len(bad)}/{len(want)} identical{detail}"


def test_golden_ids(run):
    cases = run["golden"]["cases"]
    report(run["name"], "ids (add_special_tokens)", run["ids"], [c["ids"] for c in cases], run["texts"])
    report(run["name"], "ids (no special tokens)", run["plain"], [c.get("ids_plain", c["ids"]) for c in cases], run["texts"])
    report(run["name"], "ids (special text literal)", run["literal"], [c.get("ids_literal", c["ids"]) for c in cases], run["texts"])


def test_golden_decode(run):
    cases = run["golden"]["cases"]
    report(run["name"], "decode(encode(x))", run["decoded"], [c["text"] for c in cases], run["texts"])
    report(run["name"], "decode(encode(x), skip_special)", run["decoded_skip"], [c["text_skip"] for c in cases], run["texts"])
    rand = run["golden"]["random_ids"]
    report(run["name"], "decode(random ids)", run["rand_decoded"], [c["text"] for c in rand])
    report(run["name"], "decode(random ids, skip_special)", run["rand_decoded_skip"], [c["text_skip"] for c in rand])


def test_live_reference(run):
    tok, texts = run["ref"], run["texts"]
    want = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
    report(run["name"], "ids vs live reference", run["ids"], want, texts)
    want_plain = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    report(run["name"], "ids (no special tokens) vs live reference", run["plain"], want_plain, texts)
    report(run["name"], "ids (special text literal) vs live reference", run["literal"], ref.encode_literal(tok, texts), texts)
    report(run["name"], "decode vs live reference", run["decoded"], [tok.decode(i, skip_special_tokens=False) for i in want], texts)
    rand = [c["ids"] for c in run["golden"]["random_ids"]]
    report(run["name"], "decode(random ids) vs live reference", run["rand_decoded"], [tok.decode(s, skip_special_tokens=False) for s in rand])
