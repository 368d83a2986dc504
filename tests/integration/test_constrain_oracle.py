"""Token masks of sparkd's constraint engine against llguidance (the oracle), on the real
Qwen3 vocabulary: 50 JSON schemas of real-world shape, 1,000 random prefixes each.

Both engines see the same grammar: llguidance gets sparkd's policies spelled out (compact
JSON separators, no whitespace, additionalProperties false where the schema leaves it out).
At each prefix llguidance's mask (end-of-sequence bits aside) and its accepting flag are
streamed to build/constrain_tool, which compares them with sparkd's; the walk then takes a
random token llguidance allows, preferring now and then one that closes a string so the
walks cross the whole structure.

The one documented difference: where the grammar forces text (one byte possible, then one
again, ...), both engines allow only tokens that spell a prefix of that text, but not always
the same ones (sparkd: the first token of the tokenizer's encoding of the forced text, or
every prefix token when that encoding could merge with what follows; llguidance also looks
at the token before). Such steps are counted and printed; every other difference fails.

`make test` runs 200 prefixes per schema; SPARKD_ORACLE_PREFIXES=1000 (make
constrain-oracle) runs the full 50 x 1,000. String formats (date-time, email, ...) and
bounded non-integer numbers are left out: their spellings differ in detail from
llguidance's, and the end-to-end tests check them with jsonschema instead.
"""
import json
import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, REPO

sys.path.insert(0, str(REPO / "tests" / "gen"))
from constrain_schemas import closed, schemas  # noqa: E402

llguidance = pytest.importorskip("llguidance")
TOOL = Path(os.environ.get("SPARKD_BIN", REPO / "build" / "sparkd")).resolve().parent / "constrain_tool"
OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
NUM_SCHEMAS, MAX_WALK = 50, 80
PREFIXES = int(os.environ.get("SPARKD_ORACLE_PREFIXES", "200"))


def differs_by_policy(schema):
    """String formats, and non-integer numbers with bounds (sparkd writes k.f with k in
    range and a fraction not ending in 0; llguidance's decimal ranges differ in detail)."""
    def bounded_number(x):
        if isinstance(x, dict):
            if x.get("type") == "number" and any(k in x for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
                return True
            return any(bounded_number(v) for v in x.values())
        return isinstance(x, list) and any(bounded_number(v) for v in x)
    return '"format"' in json.dumps(schema) or bounded_number(schema)


def oracle_schemas():
    return [closed(s) for s in schemas(200, seed=19) if not differs_by_policy(s)][:NUM_SCHEMAS]


def test_masks_equal_llguidance():
    assert TOOL.exists(), f"{TOOL} is missing: make build/constrain_tool"
    tokenizer_dir = FIXTURES / "tokenizers" / "qwen3"
    lt = llguidance.LLTokenizer((tokenizer_dir / "tokenizer.json").read_text())
    words = (lt.vocab_size + 31) // 32
    closing = np.zeros(lt.vocab_size, dtype=bool)  # tokens holding a '"'
    for t in range(lt.vocab_size):
        closing[t] = b'"' in lt.decode_bytes([t])
    proc = subprocess.Popen([str(TOOL), "compare", str(tokenizer_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    rng = random.Random(19)
    test_schemas = oracle_schemas()
    assert len(test_schemas) == NUM_SCHEMAS
    failures, total_compares, explained = [], 0, 0
    for index, schema in enumerate(test_schemas):
        matcher = llguidance.LLMatcher(lt, llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=OPTIONS), log_level=0)
        assert not matcher.is_error(), matcher.get_error()
        header = {"spec": {"kind": "json_schema", "schema": json.dumps(schema)}, "words": words}
        proc.stdin.write((json.dumps(header) + "\n").encode())
        forced, walk = [], 0
        for _ in range(PREFIXES):
            mask = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint32).copy()
            for e in lt.eos_tokens:
                mask[e // 32] &= ~np.uint32(1 << (e % 32))
            proc.stdin.write(struct.pack("<ii", 0, int(matcher.is_accepting())) + mask[:words].tobytes())
            forced.append(matcher.compute_ff_bytes())
            allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:lt.vocab_size])
            if len(allowed) == 0 or walk >= MAX_WALK:
                matcher.reset()
                proc.stdin.write(struct.pack("<i", 2))
                walk = 0
                continue
            closers = allowed[closing[allowed]]
            pool = closers if len(allowed) > 1000 and len(closers) and rng.random() < 0.3 else allowed
            token = int(pool[rng.randrange(len(pool))])
            assert matcher.consume_token(token)
            proc.stdin.write(struct.pack("<ii", 1, token))
            walk += 1
        proc.stdin.write(struct.pack("<i", 3))
        proc.stdin.flush()
        result = json.loads(proc.stdout.readline())
        assert "error" not in result, (index, result["error"], schema)
        if result["advance_failures"]:
            failures.append((index, "llguidance's tokens rejected", result["advance_failures"], json.dumps(schema)[:200]))
        total_compares += result["compares"]
        for ex in result["examples"]:
            ff = forced[ex["step"]]
            ours = [lt.decode_bytes([t]) for t in ex["extra"]]
            theirs = [lt.decode_bytes([t]) for t in ex["missing"]]
            boundary = (ex["extra_n"] + ex["missing_n"] <= 8 and ex["accepting"] == ex["accepting_ref"]
                        and all(ff.startswith(b) for b in ours + theirs))
            if boundary:
                explained += 1
            else:
                failures.append((index, ex["step"], ours[:4], theirs[:4], ex["extra_n"], ex["missing_n"], json.dumps(schema)[:200]))
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    print(f"{total_compares} masks compared on {NUM_SCHEMAS} schemas; {explained} differ at forced-text boundaries")
    assert total_compares == NUM_SCHEMAS * PREFIXES
    assert not failures, f"{len(failures)} masks differ from llguidance: {failures[:5]}"
