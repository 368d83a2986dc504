#!/usr/bin/env python3
"""SmolLM2 on the CPU: sparkd's CPU backend side by side with llama.cpp, same threads, one run.

Measures prefill tok/s (one prompt of --prompt-len tokens in one step), decode tok/s at
batch 1, and decode tok/s at --batch sequences decoding together. sparkd's side is
tests/bench/cpu_bench.cpp (the Makefile builds it as build/cpu_bench); llama.cpp's side
uses llama-cpp-python (`pip install llama-cpp-python` builds llama.cpp from source)
through its low-level batch API, so both run the same
shapes: the same prompt length, the same steps, logits only for each sequence's last row.
Each engine runs --repeats times, alternating, and the best run of each is reported
(the machines here are shared and noisy).

  python tests/bench/cpu_bench.py [--threads 2] [--build build] [--model models/...gguf]
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_cpp_peer import clear_memory, open_context  # noqa: E402


def build_sparkd_bench(build):
    """tests/bench/cpu_bench.cpp, linked against the engine by the Makefile's rule."""
    exe = os.path.join(build, "cpu_bench")
    subprocess.run(["make", "--no-print-directory", f"BUILD={build}", exe], cwd=ROOT, check=True)
    return os.path.join(ROOT, exe)


def run_sparkd(exe, model, threads, prompt_len, decode_tokens, batch):
    out = subprocess.run([exe, model, str(threads), str(prompt_len), str(decode_tokens), str(batch)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


class LlamaCpp:
    def __init__(self, model, threads, max_tokens, batch):
        n_batch = max(512, batch * 64)
        self.L, self.model, self.ctx = open_context(model, threads, max_tokens * batch + 64, n_batch, batch)
        L = self.L
        vocab = L.llama_model_get_vocab(self.model) if hasattr(L, "llama_model_get_vocab") else None
        self.n_vocab = L.llama_vocab_n_tokens(vocab) if vocab is not None else L.llama_n_vocab(self.model)
        self.batch = L.llama_batch_init(n_batch, 0, batch)
        self.version = getattr(L, "__version__", "?")

    def clear(self):
        clear_memory(self.L, self.ctx)

    def step(self, rows):
        """rows: list of (token, pos, seq, want_logits)."""
        b = self.batch
        b.n_tokens = len(rows)
        for i, (tok, pos, seq, want) in enumerate(rows):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if want else 0
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def bench(self, prompt_len, decode_tokens, batch):
        tok = lambda p, s: (1000 + 31 * p + 7 * s) % self.n_vocab
        self.clear()
        self.step([(tok(p, 0), p, 0, p == 7) for p in range(8)])  # warm-up
        self.clear()
        t0 = time.perf_counter()
        self.step([(tok(p, 0), p, 0, p == prompt_len - 1) for p in range(prompt_len)])
        prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        for i in range(decode_tokens):
            p = prompt_len + i
            self.step([(tok(p, 0), p, 0, True)])
        decode1 = time.perf_counter() - t0
        self.clear()
        plen = max(1, prompt_len // 4)
        self.step([(tok(p, s), p, s, p == plen - 1) for s in range(batch) for p in range(plen)])
        steps = max(1, decode_tokens // 2)
        t0 = time.perf_counter()
        for i in range(steps):
            p = plen + i
            self.step([(tok(p, s), p, s, True) for s in range(batch)])
        decodeb = time.perf_counter() - t0
        return {"engine": f"llama.cpp (llama-cpp-python {self.version})", "prefill_tok_s": round(prompt_len / prefill, 1),
                "decode_b1_tok_s": round(decode_tokens / decode1, 1),
                "decode_bN_tok_s": round(batch * steps / decodeb, 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--bench-exe", help="a cpu_bench binary already built (skips compiling one)")
    args = ap.parse_args()

    exe = args.bench_exe or build_sparkd_bench(args.build)
    try:
        llama = LlamaCpp(args.model, args.threads, args.prompt_len + args.decode_tokens, args.batch)
    except ImportError:
        llama = None
        print("llama_cpp is not installed (pip install llama-cpp-python): reporting sparkd only")
    keys = ["prefill_tok_s", "decode_b1_tok_s", "decode_bN_tok_s"]
    best = {}
    for _ in range(args.repeats):
        runs = [("sparkd", lambda: run_sparkd(exe, args.model, args.threads, args.prompt_len, args.decode_tokens, args.batch))]
        if llama:
            runs.append(("llama.cpp", lambda: llama.bench(args.prompt_len, args.decode_tokens, args.batch)))
        for name, fn in runs:
            r = fn()
            prev = best.get(name)
            best[name] = r if prev is None else {**r, **{k: max(r[k], prev[k]) for k in keys}}
    print(f"SmolLM2-135M Q4_1, {args.threads} threads, prompt {args.prompt_len}, "
          f"{args.decode_tokens} decode tokens, batch {args.batch}; best of {args.repeats}")
    print(f"{'engine':<12}{'prefill tok/s':>15}{'decode b1 tok/s':>17}{'decode b' + str(args.batch) + ' tok/s':>18}")
    for name, r in best.items():
        print(f"{name:<12}{r['prefill_tok_s']:>15.1f}{r['decode_b1_tok_s']:>17.1f}{r['decode_bN_tok_s']:>18.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "results": best}, f, indent=1)


if __name__ == "__main__":
    main()
