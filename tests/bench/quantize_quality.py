#!/usr/bin/env python3
"""What [model] quantize costs: a model as stored (quantize = "none") against the same model
quantized as it loads (quantize = "q8_0" or "fp8", quantize_keep optional), greedy, on a
fixed built-in set of twelve prompts (code, prose, numbers, JSON as plain completions; chat
turns through the model's template), N tokens each.

Starts one `sparkd serve` (CPU backend) per side on the same model folder or .gguf and
reports, per prompt and over all of them:

  top-1 agreement  teacher-forced: the 16-bit model's greedy tokens are fed to both sides as
                   the prompt prefix (one /v1/completions call per prompt, a prompt per
                   position, max_tokens 1), so position i of each side is predicted from the
                   same text; agreement is the fraction of positions where the quantized
                   side's greedy token is the 16-bit side's
  max, mean |dlp|  |logprob difference| over the 16-bit side's top --top tokens at each
                   position (both sides teacher-forced the same way; a token missing from the
                   quantized side's top 20 counts with its bound and is counted as "missing")
  first div        the first position where the two sides' free-running greedy texts part
                   ("-": none within N tokens)
  tokens/s         decode rate of the free-running pass (streamed, batch 1, one side at a time)
  weights          the bytes of weights each server holds (its dashboard's mem_weights) and
                   `sparkd check`'s figure for the same config

Also a self-check: the 16-bit side's teacher-forced greedy tokens against its own free run
(expected all equal; a shortfall is the noise floor of the measurement, not quantization).
The logprobs are the server's (log-softmax of the logits), so a difference of logprobs is a
difference of logits less the shift of each side's normaliser.

  build/venv/bin/python tests/bench/quantize_quality.py --smollm2 [--quantize q8_0,fp8]
      [--keep lm_head,embedding] [--tokens 32] [--top 5] [--threads 1] [--json FILE]
  build/venv/bin/python tests/bench/quantize_quality.py --model PATH --quantize fp8

--smollm2: SmolLM2-135M-Instruct dequantized to F16 (tests/bench/dequantize_gguf.py, written
under the build folder as spec_bench.py's --draft-pair f16 does) as the model: the 16-bit
values are the 4-bit file's, not the original checkpoint's. --quantize takes a comma list;
the 16-bit side runs once for all of them. Numbers taken while the load average is above
1.5 are marked indicative (the tokens/s most of all).

On SmolLM2 with 2 cores the default (q8_0, 12 x 32 tokens) takes about 1.5 minutes. fp8
takes about 10: the CPU backend multiplies FP8 rows through the generic row decoder
(dequantize_tensor_row), well under 1 token/s for this model; --prompts and --tokens
shorten it.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec_bench import ROOT, free_port, wait_ready  # noqa: E402

TOP_K = 20  # alternatives asked of the server (its maximum)
BUSY_LOAD = 1.5

# (name, kind, content): kind "text" is a plain completion prompt, "chat" a user turn.
PROMPTS = [
    ("code-python", "text", 'def fibonacci(n):\n    """Return the n-th Fibonacci number, iteratively."""\n'),
    ("code-cpp", "text", "#include <vector>\n\n// Returns the sum of the even elements of v.\n"
                         "int sum_even(const std::vector<int>& v) {\n"),
    ("code-sql", "text", "-- The ten customers with the most orders in 2023.\nSELECT"),
    ("prose-history", "text", "The printing press, invented by Johannes Gutenberg around 1440,"),
    ("prose-story", "text", "Once upon a time, in a small village by the sea, there lived"),
    ("numbers-seq", "text", "1, 1, 2, 3, 5, 8, 13, 21, 34,"),
    ("numbers-csv", "text", "year,population,growth\n1990,5200,\n1995,5650,8.7%\n2000,6100,8.0%\n"),
    ("json", "text", '{"name": "Alice Smith", "age": 34, "email": '),
    ("chat-explain", "chat", "Explain in a few sentences how a hash table works."),
    ("chat-poem", "chat", "Write a short poem about autumn leaves."),
    ("chat-math", "chat", "What is 17 multiplied by 23? Show your steps."),
    ("chat-translate", "chat", "Translate to French: The weather is nice today, so we are going to the park."),
]


def http(url, body=None, timeout=600):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: HTTP {e.code}: {e.read().decode(errors='replace')}") from None


class Server:
    """One `sparkd serve` on the CPU backend with [model] quantize = `quantize`."""

    def __init__(self, sparkd, model, quantize, keep, threads, tmp):
        self.sparkd, self.quantize = sparkd, quantize
        self.label = "16-bit" if quantize == "none" else quantize + (f" (keep {','.join(keep)})" if keep else "")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.config = os.path.join(tmp, f"{quantize}.toml")
        keep_line = f"quantize_keep = {json.dumps(keep)}\n" if keep and quantize != "none" else ""
        # A small KV budget: two or three servers share the machine with other work.
        with open(self.config, "w") as f:
            f.write(f'[model]\npath = "{model}"\nmax_model_len = 2048\nquantize = "{quantize}"\n{keep_line}'
                    f'[engine]\nbackend = "cpu"\ncpu_threads = {threads}\nmemory_fraction = 0.05\n'
                    f'[server]\nport = {port}\n[log]\nlevel = "warn"\n')
        self.log = os.path.join(tmp, f"{quantize}.log")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([self.sparkd, "--config", self.config], stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "w"))

    def wait(self):
        try:
            wait_ready(self.url, self.proc)
        except SystemExit:
            sys.stderr.write(open(self.log).read()[-4000:])
            raise

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def post(self, path, body):
        return http(self.url + path, body)

    def weights_bytes(self):
        snap = http(self.url + "/api/snapshot")
        series = snap.get("series", {}).get("mem_weights") or [None]
        return series[-1]

    def check_weights(self):
        """`sparkd check`'s weights line for this config, as printed ("136.4 MiB")."""
        out = subprocess.run([self.sparkd, "check", "--config", self.config], capture_output=True, text=True)
        m = re.search(r"^\s*weights\s+(.+)$", out.stdout, re.M)
        return m.group(1).strip() if m else None

    def vocab_size(self):
        # The server names its vocabulary's bound when asked for an id outside it.
        try:
            self.post("/detokenize", {"tokens": [1 << 30]})
        except RuntimeError as e:
            m = re.search(r"outside the vocabulary \[0, (\d+)\)", str(e))
            if m:
                return int(m.group(1))
        sys.exit("could not learn the vocabulary size from /detokenize")


def token_table(sparkd, model, vocab):
    """Each id's text as the server writes it in logprobs (decode of one id, specials kept),
    and the inverse for the texts only one id decodes to."""
    lines = "".join(json.dumps({"ids": [i]}) + "\n" for i in range(vocab))
    out = subprocess.run([sparkd, "detokenize", "--model", model], input=lines, capture_output=True, text=True,
                         check=True)
    texts = [json.loads(line)["text"] for line in out.stdout.splitlines()]
    ids = {}
    for i, t in enumerate(texts):
        ids.setdefault(t, []).append(i)
    return {t: v[0] for t, v in ids.items() if len(v) == 1}


def prompt_ids(server, kind, content):
    body = {"prompt": content} if kind == "text" else {"messages": [{"role": "user", "content": content}]}
    return server.post("/tokenize", body)["tokens"]


def free_run(server, ids, n):
    """Greedy, streamed, batch 1: (token texts, text, decode seconds after the first token)."""
    body = {"prompt": ids, "max_tokens": n, "temperature": 0, "logprobs": 0, "stream": True}
    req = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    tokens, text, first, last = [], "", None, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            for c in chunk.get("choices", []):
                lp = c.get("logprobs") or {}
                if lp.get("tokens"):
                    now = time.perf_counter()
                    first = first if first is not None else now
                    last = now
                    tokens += lp["tokens"]
                text += c.get("text") or ""
    return tokens, text, (last - first) if first is not None else 0.0


def teacher_forced(server, ids, ref_ids):
    """For each i < len(ref_ids): the greedy token and top alternatives {text: logprob} after
    ids + ref_ids[:i]."""
    out = []
    for start in range(0, len(ref_ids), 64):  # at most 64 prompts a call
        prompts = [ids + ref_ids[:i] for i in range(start, min(len(ref_ids), start + 64))]
        resp = server.post("/v1/completions", {"prompt": prompts, "max_tokens": 1, "temperature": 0,
                                               "logprobs": TOP_K})
        for c in sorted(resp["choices"], key=lambda c: c["index"]):
            lp = c["logprobs"]
            out.append((lp["tokens"][0], lp["top_logprobs"][0]))
    return out


def compare(ref_tf, q_tf, ref_tokens, top):
    """Per-position agreement and |logprob differences| of two teacher-forced passes."""
    agree, diffs, missing, first_tf, worst = 0, [], 0, None, []
    for i, ((_, ref_top), (q_tok, q_top)) in enumerate(zip(ref_tf, q_tf)):
        if q_tok == ref_tokens[i]:
            agree += 1
        elif first_tf is None:
            first_tf = i
        floor = min(q_top.values())
        here = []
        for t, lp in sorted(ref_top.items(), key=lambda kv: -kv[1])[:top]:
            if t in q_top:
                here.append(abs(lp - q_top[t]))
            else:
                missing += 1
                here.append(max(0.0, lp - floor))  # a lower bound: the token is below q's last
        diffs += here
        worst.append(max(here))
    return agree, diffs, missing, first_tf, worst


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def load():
    return os.getloadavg()[0]


def fmt_bytes(b):
    return f"{b / 2**20:.1f} MiB" if b else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", help="a Hugging Face folder or .gguf with 16-bit (or f32) weights")
    ap.add_argument("--smollm2", action="store_true",
                    help="SmolLM2-135M-Instruct dequantized to F16 (made under the build folder if missing)")
    ap.add_argument("--quantize", default="q8_0", help="q8_0, fp8, or both as q8_0,fp8")
    ap.add_argument("--keep", default="", help="quantize_keep: attention,mlp,experts,lm_head,embedding")
    ap.add_argument("--tokens", type=int, default=32, help="greedy tokens per prompt")
    ap.add_argument("--top", type=int, default=5, help="the 16-bit side's top tokens compared at each position")
    ap.add_argument("--threads", type=int, default=1, help="cpu_threads of each server")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help="the first N built-in prompts")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if bool(args.model) == args.smollm2:
        ap.error("give --model PATH or --smollm2")
    variants = [q.strip() for q in args.quantize.split(",") if q.strip()]
    if not variants or any(q not in ("q8_0", "fp8") for q in variants):
        ap.error("--quantize: q8_0, fp8 or a comma list of them")
    if not 1 <= args.top <= TOP_K:
        ap.error(f"--top: 1 to {TOP_K}")
    keep = [k.strip() for k in args.keep.split(",") if k.strip()]
    sparkd = os.path.join(ROOT, args.build, "sparkd")
    if args.smollm2:
        args.model = os.path.join(ROOT, args.build, "bench", "SmolLM2-135M-Instruct.F16.gguf")
        if not os.path.exists(args.model):
            os.makedirs(os.path.dirname(args.model), exist_ok=True)
            subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "dequantize_gguf.py"),
                            os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"), args.model,
                            "--type", "f16"], check=True)
    args.model = os.path.abspath(args.model)
    prompts = PROMPTS[:args.prompts]
    t_start = time.time()
    loads = [load()]
    print(f"model {args.model}\nquantize {', '.join(variants)}" + (f" (keep {', '.join(keep)})" if keep else "") +
          f"\n{len(prompts)} prompts x {args.tokens} greedy tokens, top {args.top} logprobs compared, "
          f"{args.threads} thread(s) a server; load average {loads[0]:.2f} at the start", flush=True)

    tmp = tempfile.mkdtemp(prefix="quantize-quality-")
    servers = [Server(sparkd, args.model, q, keep, args.threads, tmp) for q in ["none"] + variants]
    try:
        for s in servers:
            s.start()
        for s in servers:
            s.wait()
        ref = servers[0]
        table = token_table(sparkd, args.model, ref.vocab_size())
        ids = [prompt_ids(ref, kind, content) for _, kind, content in prompts]

        # Free runs, one side at a time: the reference tokens, the texts, the decode rates.
        runs = {}
        for s in servers:
            # A warm-up first: a server loading with quantize drops the file's pages from the
            # page cache (posix_fadvise), which a 16-bit server of the same file then reads back.
            free_run(s, ids[0], min(8, args.tokens))
            toks, texts, secs = [], [], 0.0
            for p in ids:
                t, text, d = free_run(s, p, args.tokens)
                toks.append(t)
                texts.append(text)
                secs += d
            decoded = sum(max(0, len(t) - 1) for t in toks)
            runs[s.quantize] = {"tokens": toks, "texts": texts, "decode_tok_s": decoded / secs if secs else None}
            loads.append(load())
            print(f"  free run {s.label}: {runs[s.quantize]['decode_tok_s']:.1f} tokens/s "
                  f"(load average {loads[-1]:.2f})", flush=True)

        # The reference's token ids; a text several ids decode to ends the prompt's scoring there.
        ref_ids, truncated = [], 0
        for toks in runs["none"]["tokens"]:
            row = []
            for t in toks:
                if t not in table:
                    truncated += 1
                    break
                row.append(table[t])
            ref_ids.append(row)
        for row, toks, text in zip(ref_ids, runs["none"]["tokens"], runs["none"]["texts"]):
            decoded = ref.post("/detokenize", {"tokens": row, "skip_special_tokens": True})["prompt"]
            if len(row) == len(toks) and decoded != text:
                print("  warning: the reference ids do not decode to the reference text", flush=True)

        # Teacher-forced passes, the servers side by side (their timing is not reported).
        tf = {}

        def score(s):
            tf[s.quantize] = [teacher_forced(s, p, row) for p, row in zip(ids, ref_ids)]

        threads = [threading.Thread(target=score, args=(s,)) for s in servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if len(tf) != len(servers):
            sys.exit("a teacher-forced pass failed (see above)")
        loads.append(load())

        results = {"model": args.model, "keep": keep, "tokens": args.tokens, "top": args.top,
                   "threads": args.threads, "prompts": [p[0] for p in prompts], "truncated_positions": truncated,
                   "sides": {}}
        ref_tokens = [[t for t in toks[:len(row)]] for toks, row in zip(runs["none"]["tokens"], ref_ids)]
        for s in servers:
            rows, all_diffs, agree_all, n_all, missing_all = [], [], 0, 0, 0
            for i, (name, kind, _) in enumerate(prompts):
                agree, diffs, missing, first_tf, worst = compare(tf["none"][i], tf[s.quantize][i], ref_tokens[i],
                                                                 args.top)
                n = len(ref_tokens[i])
                div = first_divergence(runs["none"]["tokens"][i], runs[s.quantize]["tokens"][i])
                rows.append({"prompt": name, "kind": kind, "positions": n, "agree": agree,
                             "first_divergence": div, "first_disagreement_teacher_forced": first_tf,
                             "max_abs_dlogprob": max(diffs) if diffs else None,
                             "mean_abs_dlogprob": sum(diffs) / len(diffs) if diffs else None,
                             "missing": missing, "text": runs[s.quantize]["texts"][i],
                             "teacher_forced_tokens": [t for t, _ in tf[s.quantize][i]],
                             "max_abs_dlogprob_by_position": worst})
                all_diffs += diffs
                agree_all += agree
                n_all += n
                missing_all += missing
            results["sides"][s.quantize] = {
                "label": s.label, "weights_bytes": s.weights_bytes(), "check_weights": s.check_weights(),
                "decode_tok_s": runs[s.quantize]["decode_tok_s"], "agree": agree_all, "positions": n_all,
                "top1_agreement": agree_all / n_all if n_all else None,
                "max_abs_dlogprob": max(all_diffs) if all_diffs else None,
                "mean_abs_dlogprob": sum(all_diffs) / len(all_diffs) if all_diffs else None,
                "missing": missing_all, "per_prompt": rows}
    finally:
        for s in servers:
            s.stop()
    elapsed = time.time() - t_start
    results["elapsed_s"] = elapsed
    results["load_average"] = loads
    results["indicative"] = max(loads) > BUSY_LOAD

    if args.json:
        results["reference_texts"] = runs["none"]["texts"]
        results["reference_tokens"] = runs["none"]["tokens"]
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)

    # The report.
    sides = results["sides"]
    cols = [sides[s.quantize] for s in servers]
    w = max(16, *(len(c["label"]) + 2 for c in cols))

    def line(name, cells):
        print(f"{name:24}" + "".join(f"{c:>{w}}" for c in cells))

    print()
    line("", [c["label"] for c in cols])
    line("weights (server)", [fmt_bytes(c["weights_bytes"]) for c in cols])
    line("weights (sparkd check)", [c["check_weights"] or "?" for c in cols])
    line("decode tokens/s", [f"{c['decode_tok_s'] or 0:.1f}" for c in cols])
    line("top-1 agreement", [f"{c['agree']}/{c['positions']} {100 * c['top1_agreement']:5.1f}%" for c in cols])
    line("max |dlogprob|", ["-"] + [f"{c['max_abs_dlogprob']:.4f}" for c in cols[1:]])
    line("mean |dlogprob|", ["-"] + [f"{c['mean_abs_dlogprob']:.4f}" for c in cols[1:]])
    print("(the 16-bit column's agreement: its teacher-forced tokens against its own free run)")
    for s in servers[1:]:
        side = sides[s.quantize]
        print(f"\n{side['label']} against the 16-bit model, per prompt (positions teacher-forced on the 16-bit "
              f"tokens; |dlogprob| over its top {args.top}):")
        print(f"  {'prompt':16}{'kind':6}{'agree':>8}{'first div':>11}{'max|dlp|':>10}{'mean|dlp|':>11}"
              "  quantized text")
        for r in side["per_prompt"]:
            div = "-" if r["first_divergence"] is None else str(r["first_divergence"])
            if r["first_disagreement_teacher_forced"] != r["first_divergence"] and \
                    (r["first_divergence"] is None or r["first_divergence"] < r["positions"]):
                div += "*"
            text = r["text"].replace("\n", "\\n")
            text = text[:40] + ("..." if len(text) > 40 else "")
            print(f"  {r['prompt']:16}{r['kind']:6}{r['agree']:>4}/{r['positions']:<3}{div:>11}"
                  f"{r['max_abs_dlogprob'] or 0:>10.4f}{r['mean_abs_dlogprob'] or 0:>11.4f}  {text}")
        if side["missing"]:
            print(f"  {side['missing']} of the 16-bit top-{args.top} tokens were outside the quantized top {TOP_K} "
                  f"(counted at their bound)")
    if any(r["first_disagreement_teacher_forced"] != r["first_divergence"] for s in servers[1:]
           for r in sides[s.quantize]["per_prompt"]
           if r["first_divergence"] is None or r["first_divergence"] < r["positions"]):
        print("  * the teacher-forced first disagreement differs from the free runs' first divergence")
    if truncated:
        print(f"\n{truncated} prompt(s) scored short: a reference token's text is several ids' text")
    print(f"\n{elapsed:.0f} s; load average " + " -> ".join(f"{x:.2f}" for x in loads) +
          ("  (above 1.5: the numbers, tokens/s most of all, are indicative)" if results["indicative"] else ""))
    print("16-bit texts:")
    for (name, _, _), text in zip(prompts, runs["none"]["texts"]):
        print(f"  {name:16}{text[:60]!r}")


if __name__ == "__main__":
    main()
