#!/usr/bin/env python3
"""Structured-output speed: sparkd's constraint engine beside llguidance and xgrammar, one
thread each, on the same schemas and the same token sequences, in one run.

For each vocabulary (Qwen3 151k, Llama 3.1 128k) and each schema (tests/gen/constrain_schemas.py,
with sparkd's compact-JSON policies spelled out for the peers), token sequences are first
drawn by random walks under llguidance that end in a complete value; then each engine
compiles the schema (no cache) and replays the sequences, timing every mask. The engines
alternate schema by schema so load changes hit all three alike. Printed: per-token mask time
mean and p99, compile time median and p99, and sparkd's ratio to each peer.

  make constrain-bench          (installs xgrammar, builds build/constrain_tool)
  python tests/bench/constrain_bench.py [--schemas 40] [--walks 2] [--tool build/constrain_tool]
                                        [--baseline OTHER/constrain_tool]

--baseline adds another build of sparkd's engine (say, the main branch's) as one more
engine in the same run, and prints the change from it.

Compare numbers only when `uptime` shows a load average under ~1.5: this prints it.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import fixture_files  # noqa: E402
from constrain_schemas import closed, schemas  # noqa: E402

FIXTURES = str(fixture_files.fixtures_dir())
OPTIONS = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def walks(lt, llguidance, schema, count, rng, closing, max_len=120):
    """Token sequences that llguidance accepts as complete values."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=OPTIONS)
    eos = np.array(lt.eos_tokens)
    out = []
    for _ in range(count * 4):
        m = llguidance.LLMatcher(lt, grammar, log_level=0)
        seq = []
        while len(seq) < max_len and not (m.is_accepting() and rng.random() < 0.5):
            mask = np.frombuffer(m.compute_bitmask(), dtype=np.uint8)
            allowed = np.flatnonzero(np.unpackbits(mask, bitorder="little")[:lt.vocab_size])
            allowed = allowed[~np.isin(allowed, eos)]
            if len(allowed) == 0:
                break
            # Now and then a token with a quote, so strings end and the walk crosses the structure.
            closers = allowed[closing[allowed]]
            pool = closers if len(allowed) > 1000 and len(closers) and rng.random() < 0.3 else allowed
            t = int(pool[rng.randrange(len(pool))])
            m.consume_token(t)
            seq.append(t)
        if m.is_accepting():
            out.append(seq)
        if len(out) == count:
            break
    return out


def stats(values):
    a = np.array(values, dtype=float)
    return a.mean(), np.percentile(a, 99), np.median(a)


def bench_vocab(name, tokenizer_dir, tool, args, llguidance, xgr, transformers):
    lt = llguidance.LLTokenizer(open(os.path.join(tokenizer_dir, "tokenizer.json")).read())
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(tokenizer_dir, "tokenizer.json"))
    xinfo = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=lt.vocab_size)
    xcompiler = xgr.GrammarCompiler(xinfo, max_threads=1, cache_enabled=False)
    tools = {"sparkd": tool}  # engine name -> constrain_tool
    if args.baseline:
        tools["sparkd-base"] = args.baseline
    procs = {engine: subprocess.Popen([path, "bench", tokenizer_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for engine, path in tools.items()}
    rng = random.Random(5)
    res = {k: {"mask": [], "compile": []} for k in (*tools, "llguidance", "xgrammar")}
    lbit = llguidance.numpy.allocate_token_bitmask(1, lt.vocab_size)
    xbit = xgr.allocate_token_bitmask(1, lt.vocab_size)
    closing = np.array([b'"' in lt.decode_bytes([t]) for t in range(lt.vocab_size)])
    used = 0
    for schema in [closed(s) for s in schemas(args.schemas, seed=23)]:
        seqs = walks(lt, llguidance, schema, args.walks, rng, closing)
        if not seqs:
            continue
        text = json.dumps(schema)
        # sparkd (and the baseline build)
        ours = {}
        for engine, proc in procs.items():
            proc.stdin.write(json.dumps({"spec": {"kind": "json_schema", "schema": text}, "sequences": seqs}) + "\n")
            proc.stdin.flush()
            ours[engine] = json.loads(proc.stdout.readline())
        if any("error" in r for r in ours.values()):
            print(f"  sparkd refused a schema: {[r.get('error') for r in ours.values()]}", file=sys.stderr)
            continue
        # llguidance
        t = time.perf_counter()
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=OPTIONS)
        llguidance.LLMatcher(lt, grammar, log_level=0)
        lcompile = (time.perf_counter() - t) * 1e6
        lmask = []
        for seq in seqs:
            m = llguidance.LLMatcher(lt, grammar, log_level=0)
            for tok in seq:
                t = time.perf_counter()
                llguidance.numpy.fill_next_token_bitmask(m, lbit, 0)
                lmask.append((time.perf_counter() - t) * 1e6)
                m.consume_token(tok)
        # xgrammar
        try:
            t = time.perf_counter()
            compiled = xcompiler.compile_json_schema(text, any_whitespace=False, separators=(",", ":"))
            xcompile = (time.perf_counter() - t) * 1e6
        except Exception as e:  # noqa: BLE001 - a peer that refuses a schema is reported, not fatal
            print(f"  xgrammar refused a schema: {e}", file=sys.stderr)
            continue
        xmask = []
        for seq in seqs:
            m = xgr.GrammarMatcher(compiled)
            for tok in seq:
                t = time.perf_counter()
                m.fill_next_token_bitmask(xbit)
                xmask.append((time.perf_counter() - t) * 1e6)
                if not m.accept_token(tok):
                    break
        for engine, r in ours.items():
            res[engine]["mask"] += r["mask_us"]
            res[engine]["compile"].append(r["compile_us"])
        res["llguidance"]["mask"] += lmask
        res["llguidance"]["compile"].append(lcompile)
        res["xgrammar"]["mask"] += xmask
        res["xgrammar"]["compile"].append(xcompile)
        used += 1
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    print(f"\n{name}: {lt.vocab_size} tokens, {used} schemas, {len(res['sparkd']['mask'])} masks per engine")
    print(f"  {'engine':<11} {'mask mean us':>13} {'mask median us':>15} {'mask p99 us':>12} {'compile median ms':>18} "
          f"{'compile p99 ms':>15}")
    rows = {}
    for engine, r in res.items():
        mean, p99, med = stats(r["mask"])
        _, cp99, cmed = stats(r["compile"])
        rows[engine] = (mean, p99, cmed / 1000, cp99 / 1000)
        print(f"  {engine:<11} {mean:>13.1f} {med:>15.1f} {p99:>12.1f} {cmed / 1000:>18.2f} {cp99 / 1000:>15.2f}")
    for peer in ("llguidance", "xgrammar", "sparkd-base")[:3 if args.baseline else 2]:
        s, p = rows["sparkd"], rows[peer]
        print(f"  sparkd / {peer}: mask mean x{s[0] / p[0]:.2f}, mask p99 x{s[1] / p[1]:.2f}, "
              f"compile median x{s[2] / p[2]:.2f}, compile p99 x{s[3] / p[3]:.2f} (below 1 = sparkd faster)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--schemas", type=int, default=40)
    ap.add_argument("--walks", type=int, default=2)
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "constrain_tool"))
    ap.add_argument("--baseline", help="another build's constrain_tool, timed in the same run")
    args = ap.parse_args()
    import llguidance
    import llguidance.numpy  # noqa: F401
    import transformers
    import xgrammar as xgr
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()), "(compare only under ~1.5)")
    for name, sub in (("Qwen3", "qwen3"), ("Llama 3.1", "llama3_1")):
        bench_vocab(name, os.path.join(FIXTURES, "tokenizers", sub), args.tool, args, llguidance, xgr, transformers)


if __name__ == "__main__":
    main()
