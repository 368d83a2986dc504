#!/usr/bin/env python3
"""Speculative decoding on the CPU backend with SmolLM2: on vs off, side by side, one run.

Starts `sparkd serve` with [engine] speculative = "ngram" (or "draft", with --draft) and
runs `sparkd bench --compare-speculative` (passes on, off, off, on over the same prompts;
the off passes opt out per request) on these workloads:

  code-edit       a source file of this repository in the prompt, "rewrite it with one
                  change" (the answer quotes most of the file), batch 1
  summarise       a section of README.md, "summarise it", batch 1
  non-repetitive  random words (the bench's own prompts), sampled at temperature 1, batch 1
  concurrency-32  the random prompts at 32 in flight (adaptivity: no worse than off)
  free-text-0, free-text-0.7
                  the random prompts at batch 1, greedy and at temperature 0.7

  python tests/bench/spec_bench.py [--build build] [--model models/...gguf] [--threads 1]
                                   [--draft PATH | --draft-pair f16|q8_0] [--workloads a,b]

--draft-pair f16|q8_0: the target is SmolLM2 dequantized to F16 or requantized to Q8_0
(tests/bench/dequantize_gguf.py, written under the build folder), the draft the 4-bit
file it came from: a model about 3x (F16) or 1.5x (Q8_0) the draft's bytes, whose draft
agrees with it more than a quantization of the original weights would.
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCES = ["engine/core/sequence.cpp", "engine/core/admission.cpp"]
README_SECTIONS = ["Dashboard", "Speculative decoding"]


def code_edit_lines():
    out = []
    for path in SOURCES:
        text = open(os.path.join(ROOT, path)).read()
        names = re.findall(r"\b([a-z]+_[a-z_]+)\(", text)
        old = max(set(names), key=names.count) if names else "main"
        prompt = (f"Here is the file {path}:\n\n```cpp\n{text}```\n\nRewrite the whole file with one change: "
                  f"rename `{old}` to `{old}_v2` everywhere. Output only the complete new file.")
        out.append({"messages": [{"role": "user", "content": prompt}], "max_tokens": 192})
    return out


def summarise_lines():
    readme = open(os.path.join(ROOT, "README.md")).read()
    out = []
    for title in README_SECTIONS:
        m = re.search(r"^## " + re.escape(title) + r"\n(.*?)(?=^## )", readme, re.S | re.M)
        if not m:
            continue
        doc = m.group(1).strip()[:3000]
        prompt = f"Document:\n\n{doc}\n\nSummarise the document above in a few sentences, using its own words."
        out.append({"messages": [{"role": "user", "content": prompt}], "max_tokens": 128})
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("sparkd serve exited early")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.5)
    sys.exit("sparkd serve did not become ready")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    # One engine thread by default: on a 2-core machine the bench client needs the other
    # core, and sharing both made the on/off ratios swing by +-15% between runs.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workloads", default="code-edit,non-repetitive,concurrency-32,summarise")
    ap.add_argument("--draft", help="speculate with this draft model instead of prompt lookup")
    ap.add_argument("--draft-pair", choices=["f16", "q8_0"],
                    help="SmolLM2 dequantized to F16 or requantized to Q8_0 as the model, its 4-bit file as the draft")
    args = ap.parse_args()
    sparkd = os.path.join(ROOT, args.build, "sparkd")
    if args.draft_pair:
        args.draft = args.model
        args.model = os.path.join(ROOT, args.build, "bench", f"SmolLM2-135M-Instruct.{args.draft_pair.upper()}.gguf")
        if not os.path.exists(args.model):
            os.makedirs(os.path.dirname(args.model), exist_ok=True)
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "dequantize_gguf.py"), args.draft,
                            args.model, "--type", args.draft_pair], check=True)
    method = f'speculative = "draft"\nspeculative_model = "{args.draft}"' if args.draft else 'speculative = "ngram"'
    print(f"model {args.model}\n{method}", flush=True)
    tmp = tempfile.mkdtemp(prefix="spec-bench-")
    port = free_port()
    config = os.path.join(tmp, "spark.toml")
    with open(config, "w") as f:
        f.write(f'[model]\npath = "{args.model}"\n[engine]\nbackend = "cpu"\ncpu_threads = {args.threads}\n'
                f'{method}\nnum_speculative_tokens = 4\nmax_num_seqs = 64\n'
                f'[server]\nport = {port}\n[log]\nlevel = "warn"\n')
    datasets = {}
    for name, lines in (("code-edit", code_edit_lines()), ("summarise", summarise_lines())):
        datasets[name] = os.path.join(tmp, name + ".jsonl")
        with open(datasets[name], "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sparkd, "--config", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(url, proc)
        for w in args.workloads.split(","):
            if w in datasets:
                extra = ["--dataset", datasets[w], "--endpoint", "chat", "--concurrency", "1"]
            elif w == "non-repetitive":
                # Sampled at temperature 1 (seeded, so both sides draw the same text):
                # greedy continuations of random words fall into loops that lookup predicts.
                extra = ["--num-prompts", "4", "--input-len", "128", "--output-len", "96", "--concurrency", "1",
                         "--temperature", "1"]
            elif w.startswith("free-text-"):
                extra = ["--num-prompts", "4", "--input-len", "128", "--output-len", "96", "--concurrency", "1",
                         "--temperature", w[len("free-text-"):]]
            elif w == "concurrency-32":
                # Two waves of 32, long enough that a pass is not dominated by its first prefill.
                extra = ["--num-prompts", "64", "--input-len", "64", "--output-len", "64", "--concurrency", "32"]
            else:
                sys.exit(f"unknown workload {w}")
            load = os.getloadavg()[0]
            print(f"\n#### workload {w} (load average {load:.2f} at the start)", flush=True)
            subprocess.run([sparkd, "bench", "--url", url, "--compare-speculative", *extra], check=True)
            print(f"(load average {os.getloadavg()[0]:.2f} at the end)", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
